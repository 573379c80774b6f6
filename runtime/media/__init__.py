"""Media from strangers, before any model sees it (llmpack.runtime.media): `audio` checks a sound
file's bytes and decodes it to PCM. The decoding runs in the sandbox child
(runtime/documents/sandbox.py), so this package needs no model and no server: it may import
only llmpack's base modules and `hardware` (the llama.cpp library that holds the decoder); the
engine, the server's core and the sandbox import it."""
