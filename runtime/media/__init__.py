"""The media room (llmpack.runtime.media): pictures and sound from strangers, before any model sees
them, on one path (`decoder`): the first look in the server (`header`: size, signature, the label
agreeing; `images`: a picture's structure), the decode in a sandboxed child (`pictures`: RGB;
`audio`: PCM), and the answer checked against the first look. `errors` holds what they raise.
No decoder runs in the server process, so this room needs no model and no server: it may import
only llmpack's base modules, the sandbox and `hardware` (the llama.cpp library that holds the
sound decoder); the engine and the core import it."""
