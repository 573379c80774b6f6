"""Serving one model from many machines: Ray Serve replicas of llmpack's own engine and HTTP app
(`llmpack serve --ray`). Needs the optional extra `llmpack[ray]`; nothing else imports Ray."""
