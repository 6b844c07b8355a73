"""The public HTTP API as a tenant calls it: Bearer key, JSON bodies, and RFC 9457 problem details turned
into one exception that says what the API said."""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

TIMEOUT_SECONDS = 30.0


@dataclass
class ApiProblem(Exception):
    """The API refused or failed a request (a problem+json body, or whatever it answered instead)."""

    status: int
    title: str
    detail: str = ""
    errors: list[dict[str, Any]] = field(default_factory=list)
    type: str | None = None
    retry_after: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.title}: {self.detail}"

    @property
    def input_problem(self) -> bool:
        """A 4xx the caller's request caused (its body, key, key's scopes, a conflicting replay); a 429 says
        "later", not "wrong"."""
        return 400 <= self.status < 500 and self.status != 429

    def lines(self) -> list[str]:
        """The problem for people: title and status, detail, each error's location and message, then any
        other member the API added (a review link, a state)."""
        lines = [f"{self.title} (HTTP {self.status})"]
        if self.detail:
            lines.append(self.detail)
        for error in self.errors:
            where = ".".join(str(part) for part in error.get("loc", [])) or "request"
            lines.append(f"  - {where}: {error.get('msg', error.get('type', '?'))}")
        lines.extend(f"{name}: {value}" for name, value in self.extra.items())
        if self.retry_after is not None:
            lines.append(f"retry after {self.retry_after:g} s")
        return lines


class ApiUnreachable(Exception):
    """No HTTP answer at all: nothing listens there, the connection broke, or it timed out."""


def problem_of(status: int, reason: str, headers: Mapping[str, str], content: bytes) -> ApiProblem:
    """The problem an answer that is not a 2xx carries; its body when it is not problem+json."""
    retry_after = _seconds(next((v for k, v in headers.items() if k.lower() == "retry-after"), None))
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        text = content.decode("utf-8", "replace").strip()[:300]
        return ApiProblem(status, reason or "error", text, retry_after=retry_after)
    known = {"type", "title", "status", "detail", "errors", "instance"}
    errors = body.get("errors")
    return ApiProblem(
        status=status,
        title=str(body.get("title") or reason or "error"),
        detail=str(body.get("detail") or body.get("message") or ""),
        errors=[e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else [],
        type=body.get("type"),
        retry_after=retry_after,
        extra={k: v for k, v in body.items() if k not in known},
    )


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: the caller's own backoff applies


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str]


class TenantApi:
    """One tenant's calls to the API at ``base_url``, through the standard library (no client package to
    install, nothing imported until a call is made)."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = TIMEOUT_SECONDS) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self._headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        self._timeout = timeout

    def absolute(self, path: str) -> str:
        return urljoin(self.base_url, path.lstrip("/"))

    def request(
        self, method: str, path: str, *, json_body: Any = None, headers: dict[str, str] | None = None
    ) -> Answer:
        """The answer of a 2xx; ApiProblem for any other status, ApiUnreachable without an answer."""
        import urllib.error
        import urllib.request

        url = self.absolute(path)
        if not url.startswith(("http://", "https://")):
            raise ApiUnreachable(f"{url} is not an http(s) URL")
        sent = {**self._headers, **(headers or {})}
        data = None
        if json_body is not None:
            data = json.dumps(json_body).encode()
            sent["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=sent, method=method)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310
                status, answered, content = response.status, dict(response.headers.items()), response.read()
        except urllib.error.HTTPError as error:
            with error:
                content = error.read()
            raise problem_of(error.code, str(error.reason), dict(error.headers.items()), content) from None
        except (OSError, http.client.HTTPException) as error:  # refused, reset, timed out, bad TLS
            raise ApiUnreachable(f"{method} {url}: {error}") from None
        try:
            body = json.loads(content) if content else None
        except ValueError:
            raise ApiProblem(status, "Not JSON", content.decode("utf-8", "replace")[:300]) from None
        return Answer(status, body, answered)

    def submit(self, body: dict[str, Any], idempotency_key: str) -> Answer:
        return self.request(
            "POST", "/extraction-jobs", json_body=body, headers={"Idempotency-Key": idempotency_key}
        )

    def job(self, path: str) -> dict[str, Any]:
        answer = self.request("GET", path)
        if not isinstance(answer.body, dict):
            raise ApiProblem(answer.status, "Unexpected answer", f"GET {path} answered no JSON object")
        return answer.body
