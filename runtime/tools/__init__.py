"""Tools the chat page's model may call beyond the page's own (llmpack.runtime.tools), with no
Flask: MCP servers the user configured (`mcp_config`: Claude Desktop's `mcpServers` file and the
page's servers, checked; `mcp_hub`: one client per server through the official `mcp` SDK, bounded in
time, size and tool count). Served by server/page/mcp_routes.py, which proxies only to these
servers. May import: llmpack's base only."""
