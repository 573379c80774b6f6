"""The OpenAI API (/v1/chat/completions, /v1/completions, /v1/models, /v1/embeddings) and
llama-server's /tokenize and /detokenize: a thin translation over the core. `protocol` reads
OpenAI's request fields into the core's requests and writes its response shapes; one
`serving_*` module per endpoint family; `routes` is the room's route table. May import core/ and
http/ only, never another protocol room."""
