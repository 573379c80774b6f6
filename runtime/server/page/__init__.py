"""The chat page's own API: saved chats and settings (`chats.ChatStore`, SQLite in the per-user
data folder, behind this launch's chat secret: `chat_routes`) and POST /v1/extract for the files
a person drops on the page (`extract_routes`). May import core/, http/ and documents/; never a
protocol room."""
