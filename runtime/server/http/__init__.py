"""What every HTTP room shares: the server's options, its state (/health), the error responses,
the guards (API key, Host check, CORS), the request context and the metrics. Imports only the
core; the rooms that define routes (openai/, responses/, anthropic/, ollama/, page/) import it, and
server/app.py wires them."""
