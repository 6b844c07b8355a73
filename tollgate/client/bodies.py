"""What ``tollgate submit FILE`` sends: FILE is either a whole request body, as in examples/
(``{"document": ..., "options": ...}``), or only a document (``{"pages": [...]}``, or an S3 reference
``{"s3_key", "version_id"}``), which is wrapped as the body's ``document``. ``--type`` sets the body's
``job_type`` and ``--options`` its options (over the file's); anything else about the body is the API's to
judge, so a body the API would refuse is sent and its problem shown rather than guessed at here."""

from __future__ import annotations

import json
from typing import Any

# The keys that make a JSON object a document rather than a request body (tollgate.core.documents).
INLINE_DOCUMENT = "pages"
DOCUMENT_REFERENCE = frozenset({"s3_key", "version_id"})


class BadInput(Exception):
    """The file or an option cannot become a request at all (nothing was sent)."""


def request_body(text: str, job_type: str | None, options: str | None) -> dict[str, Any]:
    """The request body for FILE's text, the job type asked for and options as JSON (or None)."""
    try:
        found = json.loads(text)
    except ValueError as error:
        raise BadInput(f"the file is not JSON: {error}") from None
    if not isinstance(found, dict):
        raise BadInput(f"the file holds a JSON {_json_type(found)}, not an object")
    if INLINE_DOCUMENT in found or found.keys() >= DOCUMENT_REFERENCE:
        body: dict[str, Any] = {"document": found}
    else:
        body = dict(found)
    if job_type is not None:
        said = body.get("job_type")
        if said is not None and said != job_type:
            raise BadInput(f"the file's job_type is {said!r} and --type says {job_type!r}: which one?")
        body["job_type"] = job_type
    if options is not None:
        try:
            extra = json.loads(options)
        except ValueError as error:
            raise BadInput(f"--options is not JSON: {error}") from None
        if not isinstance(extra, dict):
            raise BadInput("--options is a JSON object, such as '{\"max_words\": 80}'")
        current = body.get("options", {})
        body["options"] = {**current, **extra} if isinstance(current, dict) else extra
    return body


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else "number"
