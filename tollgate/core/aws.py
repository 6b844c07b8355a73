"""boto3 clients made on first use, so an entrypoint's cold start does not pay for AWS calls it may not make.

Importing boto3 and building one client costs about half a second of a Lambda's cold start (botocore's
modules, then the service model's JSON). The API only calls S3 for a large document and the Lambda API
for a nudge, so wiring hands it clients that come into being on the first call instead.
"""

from __future__ import annotations

import threading
from typing import Any

# boto3's default session is not safe to set up from two threads at once; one lock covers every client.
_CREATING = threading.Lock()


class LazyClient:
    """Stands in for ``boto3.client(service_name)``; attribute access creates the client once, then forwards.

    The client is built from the environment as it is at that first use (region, endpoint, credentials),
    as a client built at import would have been in a Lambda, whose environment does not change.
    """

    def __init__(self, service_name: str) -> None:
        self._service_name = service_name
        self._client: Any = None

    @property
    def created(self) -> bool:
        return self._client is not None

    def _get(self) -> Any:
        client = self._client
        if client is None:
            with _CREATING:
                if self._client is None:
                    import boto3

                    self._client = boto3.client(self._service_name)  # type: ignore[call-overload]
                client = self._client
        return client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)

    def __repr__(self) -> str:
        state = "created" if self.created else "not yet created"
        return f"LazyClient({self._service_name!r}, {state})"


def lazy_client(service_name: str) -> Any:
    """A client of ``service_name`` (``"s3"``, ``"lambda"``...) that imports boto3 and connects on first use.

    Typed ``Any`` so it fits the typed client every adapter takes; it forwards every attribute.
    """
    return LazyClient(service_name)
