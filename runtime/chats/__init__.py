"""The chat page's saved chats (llmpack.runtime.chats), with no Flask: the store in the app's data
folder (`chats.ChatStore`, SQLite through llmpack/stores.py), what it accepts (`chat_shape`: a tree
of messages, settings, presets; `chat_sources`: the server's sources a reply keeps; `chat_tools`:
the tool calls a reply made), and the exports (`chat_export`: JSON and a Markdown transcript, every
field from a file or a tool escaped). Served by server/page/chat_routes.py; `--forget` reaches the
store from the builder without the server. May import: the core (its `scrub`) and llmpack's base."""
