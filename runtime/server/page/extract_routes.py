"""POST /v1/extract: the chat page sends a dropped file's bytes as the body, its name in
`X-Filename` (percent-encoded), and gets back its text, its token count and token counts per
page or part (core/attachments.describe), to show how much of the context it takes.
The name travels only in the header (no ?filename=): a custom header makes a browser ask this
server first (a CORS preflight), so no other web site can make it read a file."""
from __future__ import annotations

from urllib.parse import unquote

from flask import Blueprint, jsonify, request

from llmpack.runtime.core.attachments import ATTACH_BODY, describe, extract
from llmpack.runtime.core.errors import ApiError
from llmpack.runtime.documents import extract as D
from llmpack.runtime.server.http import security
from llmpack.runtime.server.http.context import app_context, ready_model

bp = Blueprint("attachments", __name__)


@bp.post("/v1/extract")
@security.body_limit(ATTACH_BODY)   # the view words a refusal past MAX_FILE_BYTES itself, naming the file
def extract_route():
    model = ready_model(app_context().state)
    raw_name = request.headers.get("X-Filename")
    if not raw_name:   # a custom header: a browser must ask first (preflight) before sending it cross-origin
        raise ApiError(400, "send the file's name in the X-Filename header (percent-encoded)",
                       param="X-Filename", code="missing_filename")
    name = unquote(raw_name)
    size = request.content_length
    if size is not None and size > D.MAX_FILE_BYTES:
        raise ApiError(413, f"{name} is {size / 2**20:.0f} MB; files can be at most {D.MAX_FILE_BYTES >> 20} MB: "
                            "attach a shorter part of it", param="file", code="unreadable_file")
    request.max_content_length = D.MAX_FILE_BYTES   # a body without Content-Length stops there
    data = request.get_data(cache=False)
    doc = extract(name, data, (request.mimetype or "") if request.mimetype != "application/octet-stream" else "",
                  files=model.files)
    return jsonify(describe(doc, model))


@bp.get("/v1/documents/reading")
def reading_route():
    """The rounds under way that summarise a long file for a question about all of it
    (core/summaries.py): the page shows "page 12 of 50" while the reply waits for them."""
    model = ready_model(app_context().state)
    return jsonify({"reading": model.files.rounds.now()})
