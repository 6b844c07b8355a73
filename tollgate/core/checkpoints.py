"""Named moments on production paths where a crash would hurt most: a provider answer not yet recorded, an
SQS message recorded but not deleted, a batch sent but not marked published.

Production code announces each one and nothing listens. A harness may install one listener per process (the
fault injection of the development package ends the process there, as a kill -9 would) to prove that a
crash at that moment loses nothing and duplicates nothing. This module knows no more about it than that.
"""

from __future__ import annotations

from collections.abc import Callable

AFTER_PROVIDER_RESPONSE = "after_provider_response"
BEFORE_SQS_DELETE = "before_sqs_delete"
# The relay published a batch but has not marked it published: the next relay sends it again.
RELAY_AFTER_PUBLISH = "relay_after_publish"
# Retention stored a batch's archives but has not deleted its rows: a later tick archives them again.
RETENTION_AFTER_ARCHIVE = "retention_after_archive"
# The batch path (tollgate.execution.batch): a request file uploaded but no batch created for it; a batch
# created at the provider but not yet recorded as submitted; one line of a finished batch committed and the
# rest of its files not yet.
BATCH_AFTER_UPLOAD = "batch_after_upload"
BATCH_AFTER_CREATE = "batch_after_create"
BATCH_LINE_COMMITTED = "batch_line_committed"
CHECKPOINTS = frozenset(
    {
        AFTER_PROVIDER_RESPONSE,
        BEFORE_SQS_DELETE,
        RELAY_AFTER_PUBLISH,
        RETENTION_AFTER_ARCHIVE,
        BATCH_AFTER_UPLOAD,
        BATCH_AFTER_CREATE,
        BATCH_LINE_COMMITTED,
    }
)

Listener = Callable[[str], None]
_listener: Listener | None = None


def reached(name: str) -> None:
    """Called by production code at the checkpoint ``name``; a no-op unless a listener is installed."""
    listener = _listener
    if listener is not None:
        listener(name)


def listen(listener: Listener | None) -> Listener | None:
    """Installs the process's listener (``None`` removes it) and returns the one it replaced."""
    global _listener  # one per process, installed by a harness entrypoint at start
    previous, _listener = _listener, listener
    return previous
