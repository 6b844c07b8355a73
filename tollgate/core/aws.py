"""The one way entrypoints make boto3 clients: held to what the entrypoint declares it calls
(tollgate.core.reach), and made on first use, so a cold start does not pay for AWS calls it may not make.

Importing boto3 and building one client costs about half a second of a Lambda's cold start (botocore's
modules, then the service model's JSON). The API only calls S3 for a large document and the Lambda API
for a nudge, so wiring hands it clients that come into being on the first call instead.
"""

from __future__ import annotations

import threading
from typing import Any

# boto3's default session is not safe to set up from two threads at once; one lock covers every client.
_CREATING = threading.Lock()


def aws_client(service_name: str, *, entrypoint: str | None, session: Any = None, **options: Any) -> Any:
    """``session.client(service_name, **options)`` (boto3's default session without one), whose every call is
    checked against ``entrypoint``'s declaration while ``tollgate.core.reach.enforce`` is on. ``entrypoint``
    None is for clients no deployed role makes (the CLI under a person's credentials)."""
    if session is None:
        import boto3

        session = boto3
    client = session.client(service_name, **options)
    if entrypoint is not None:
        from tollgate.core.reach import check_call, reach_of

        reach_of(entrypoint)  # an unknown name fails here, at wiring, not at the first call

        def before_call(model: Any, **_: Any) -> None:
            check_call(entrypoint, service_name, model.name)

        # Registered on this client's own copy of the event system: other clients are not affected.
        client.meta.events.register("before-call", before_call)
    return client


class LazyClient:
    """Stands in for ``aws_client(service_name, entrypoint=...)``; attribute access creates the client once,
    then forwards.

    The client is built from the environment as it is at that first use (region, endpoint, credentials),
    as a client built at import would have been in a Lambda, whose environment does not change.
    """

    def __init__(self, service_name: str, entrypoint: str | None = None) -> None:
        self._service_name = service_name
        self._entrypoint = entrypoint
        self._client: Any = None

    @property
    def created(self) -> bool:
        return self._client is not None

    def _get(self) -> Any:
        client = self._client
        if client is None:
            with _CREATING:
                if self._client is None:
                    self._client = aws_client(self._service_name, entrypoint=self._entrypoint)
                client = self._client
        return client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)

    def __repr__(self) -> str:
        state = "created" if self.created else "not yet created"
        return f"LazyClient({self._service_name!r}, {state})"


def lazy_client(service_name: str, entrypoint: str | None = None) -> Any:
    """A client of ``service_name`` (``"s3"``, ``"lambda"``...) for ``entrypoint`` that imports boto3 and
    connects on first use.

    Typed ``Any`` so it fits the typed client every adapter takes; it forwards every attribute.
    """
    return LazyClient(service_name, entrypoint)
