"""The sandbox (llmpack.runtime.sandbox): jobs that read a stranger's bytes (a document's text, a
picture's pixels) run in warm child processes under a memory cap and a deadline (`pool`), with
the Windows job object in `winjob`. It imports nothing of llmpack but `errors`, so the engine
(pictures) and the server's documents both use it; a job names its own module."""
