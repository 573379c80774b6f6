"""The sandbox (llmpack.runtime.sandbox): jobs that read a stranger's bytes (a document's text, a
picture's pixels, a clip's samples) run in warm child processes under a memory cap and a deadline
(`pool`), with the Windows job object in `winjob`; `ladder` words a pool's failures as the caller's
errors, once for every kind of job. It imports nothing of llmpack but `errors`, so the media room
(pictures, sound) and the documents both use it; a job names its own module."""
