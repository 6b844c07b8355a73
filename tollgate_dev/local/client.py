"""A plain HTTP client for the Tollgate API, used by the demo, the benchmarks and the tests."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class HttpResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        lowered = {k.lower(): v for k, v in self.headers.items()}
        return lowered.get(name.lower())


class ApiClient:
    """One connection per request, headers exactly as given: nothing hides what goes over the wire."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 60.0) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.api_key = api_key
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        raw_body: bytes | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
    ) -> HttpResponse:
        sent: dict[str, str] = {}
        body = raw_body
        if json_body is not None:
            body = json.dumps(json_body).encode()
            sent["Content-Type"] = "application/json"
        if auth and self.api_key:
            sent["Authorization"] = f"Bearer {self.api_key}"
        sent.update(headers or {})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            return HttpResponse(response.status, dict(response.getheaders()), response.read())
        finally:
            conn.close()

    def submit(
        self, body: Any, key: str, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> HttpResponse:
        return self.request(
            "POST",
            "/extraction-jobs",
            json_body=body,
            headers={"Idempotency-Key": key, **(headers or {})},
            **kwargs,
        )
