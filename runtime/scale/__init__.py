"""Serving one model from many machines: Ray Serve replicas of llmpack's own engine and HTTP app
(`llmpack serve --ray`). Needs the optional extra `llmpack[ray]`; nothing else imports Ray.
May import the model room and the base; not the server: the CLI hands it the server's replica
and guards (served.py `ServedApp`: llmpack/ray_server.py)."""
