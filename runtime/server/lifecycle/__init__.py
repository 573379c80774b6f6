"""Starting and stopping a server: `serve()` (serve.py) binds the socket (sockets.py), starts the
waitress server (server.py), prepares the model on a background thread (prepare.py: the engine and
the `ServedModel`) while the page shows progress, opens the browser through a private redirect
file (browser.py), keeps the instance lock a second launch finds (instance.py), and stops
cleanly on Ctrl+C, SIGTERM or the console window's close button. The top of the server: it may
import every other room; nothing in the server imports it."""
