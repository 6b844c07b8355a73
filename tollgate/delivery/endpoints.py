"""Tenants' webhook endpoints: register (the secret is shown once), list, update, delete, rotate secrets.

URLs are HTTPS only, taken from the tenant's registration and never from a job. Registration applies the
sender's policy (``ssrf.check_url``) and resolves the name, so a URL that could never be sent to is refused
with a 422 there instead of burning a delivery's retry schedule; the sender checks again at every send,
because DNS can change.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlsplit
from uuid import UUID

from pydantic import BaseModel, Field, StringConstraints, field_validator

from tollgate.core.clock import Clock, IdFactory
from tollgate.core.errors import DependencyUnavailable, NotFound, ValidationFailed
from tollgate.core.models import Strict
from tollgate.db import Database
from tollgate.delivery.ssrf import (
    ResolutionFailed,
    Resolver,
    TargetRefused,
    check_url,
    parse_url,
    system_resolver,
)
from tollgate.events import DEFAULT_SUBSCRIPTION, WEBHOOK_EVENT_TYPES

ROTATION_GRACE = timedelta(hours=24)
# A resolver that could not answer (not one that said "no such name") is worth asking again shortly.
RESOLVER_RETRY_AFTER_SECONDS = 5

# Exactly the outcome events an endpoint can receive, from the events module's one list.
EventType = Annotated[
    str, StringConstraints(pattern="^(" + "|".join(re.escape(t) for t in WEBHOOK_EVENT_TYPES) + ")$")
]
# PostgreSQL text cannot hold U+0000: the schema refuses it, so such a value is a 422, not a database error.
NO_NUL = r"^[^\x00]*$"
Url = Annotated[str, StringConstraints(min_length=8, max_length=2048, pattern=NO_NUL)]
Description = Annotated[str, StringConstraints(max_length=500, pattern=NO_NUL)]


class EndpointCreate(Strict):
    url: Url
    event_types: list[EventType] = Field(
        default_factory=lambda: list(DEFAULT_SUBSCRIPTION),
        min_length=1,
        description="Without it: completed, failed and rejected. extraction.review_required.v1 (a result "
        "waiting for a reviewer, not accepted data) and extraction.cancelled.v1 are sent only to an endpoint "
        "that lists them.",
    )
    description: Description = ""

    @field_validator("event_types")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        return sorted(set(value))


class EndpointUpdate(Strict):
    url: Url | None = None
    event_types: list[EventType] | None = Field(default=None, min_length=1)
    description: Description | None = None
    enabled: bool | None = Field(default=None, strict=True)  # true or false, never 0 or "false"


class EndpointView(BaseModel):
    endpoint_id: UUID
    url: str
    description: str
    event_types: list[str]
    enabled: bool
    disabled_reason: str | None
    previous_secret_expires_at: datetime | None = Field(
        description="While set, deliveries are signed with the previous secret too."
    )
    created_at: datetime
    updated_at: datetime


class EndpointWithSecret(EndpointView):
    secret: str = Field(description="The signing secret: shown this once, keep it safe.")


class EndpointList(BaseModel):
    items: list[EndpointView]


def check_endpoint_url(url: str, *, allow_private_targets: bool, resolver: Resolver = system_resolver) -> str:
    """The registration-time check of an endpoint URL: the sender's own policy, with the name resolved now.

    Refused with a 422 naming ``url``: whatever the sender would refuse (a non-public literal address in any
    spelling, a name with any non-public address, userinfo, control characters, a port below 1024 other than
    443, anything but https), and a name that does not exist or has no address, since nothing could ever be
    delivered to it. A resolver that fails to answer is ours to fix, not the tenant's: 503 with Retry-After.
    Local development (``allow_private_targets``) checks the shape only and never asks DNS.
    """
    problem: str | None = None
    try:
        if allow_private_targets:
            parse_url(url, allow_private_targets=True)
        else:
            check_url(url, resolver=resolver)
    except TargetRefused as exc:
        problem = exc.reason
    except ResolutionFailed as exc:
        if exc.temporary:
            raise DependencyUnavailable(
                f"the URL's host could not be resolved just now: {exc.reason}",
                retry_after=RESOLVER_RETRY_AFTER_SECONDS,
            ) from exc
        problem = f"{exc.reason}; register a name that resolves to a public address"
    if problem is None and urlsplit(url).fragment:
        problem = "the URL must not have a fragment"
    if problem is not None:
        raise ValidationFailed(
            f"url: {problem}", errors=[{"loc": ["body", "url"], "type": "url", "msg": problem}]
        )
    return url


@dataclass(frozen=True)
class EndpointDeps:
    db: Database
    clock: Clock
    new_id: IdFactory
    new_secret: Callable[[], str]
    # Local development only: lets the demo's receiver on 127.0.0.1 be registered over plain http.
    allow_private_targets: bool = False
    # Host name to addresses, asked at registration (tests pass an in-memory one).
    resolver: Resolver = system_resolver


def _view(row: dict[str, Any]) -> EndpointView:
    return EndpointView.model_validate(row)


def _checked_url(deps: EndpointDeps, url: str) -> str:
    return check_endpoint_url(url, allow_private_targets=deps.allow_private_targets, resolver=deps.resolver)


def create_endpoint(deps: EndpointDeps, tenant_id: UUID, request: EndpointCreate) -> EndpointWithSecret:
    db, secret = deps.db, deps.new_secret()
    # Checked before the transaction: a DNS lookup must not hold a pooled connection.
    url = _checked_url(deps, request.url)
    with db.transaction(tenant_id) as conn:
        row = conn.execute(
            db.q.insert_endpoint,
            {
                "endpoint_id": deps.new_id(),
                "tenant_id": tenant_id,
                "url": url,
                "description": request.description,
                "event_types": request.event_types,
                "secret": secret,
                "now": deps.clock.now(),
            },
        ).fetchone()
    assert row is not None
    return EndpointWithSecret(**_view(row).model_dump(), secret=secret)


def signing_secrets_for_url(db: Database, url: str, now: datetime) -> list[str]:
    """Every secret that may sign a delivery to ``url`` now, across tenants (system role): what a receiver
    shared by several endpoints, such as the local system's demo ERP, needs to verify them."""
    with db.transaction() as conn:
        rows = conn.execute(db.q.signing_secrets_for_url, {"url": url}).fetchall()
    secrets = [row["secret"] for row in rows]
    secrets += [
        row["previous_secret"]
        for row in rows
        if row["previous_secret"]
        and row["previous_secret_expires_at"]
        and row["previous_secret_expires_at"] > now
    ]
    return secrets


def list_endpoints(db: Database, tenant_id: UUID) -> EndpointList:
    with db.transaction(tenant_id) as conn:
        rows = conn.execute(db.q.list_endpoints, {"tenant_id": tenant_id}).fetchall()
    return EndpointList(items=[_view(r) for r in rows])


def get_endpoint(db: Database, tenant_id: UUID, endpoint_id: UUID) -> EndpointView:
    with db.transaction(tenant_id) as conn:
        row = conn.execute(db.q.get_endpoint, {"tenant_id": tenant_id, "endpoint_id": endpoint_id}).fetchone()
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    return _view(row)


def update_endpoint(
    deps: EndpointDeps, tenant_id: UUID, endpoint_id: UUID, request: EndpointUpdate
) -> EndpointView:
    db = deps.db
    url = _checked_url(deps, request.url) if request.url is not None else None
    with db.transaction(tenant_id) as conn:
        row = conn.execute(
            db.q.update_endpoint,
            {
                "tenant_id": tenant_id,
                "endpoint_id": endpoint_id,
                "url": url,
                "description": request.description,
                "event_types": sorted(set(request.event_types)) if request.event_types else None,
                "enabled": request.enabled,
                "now": deps.clock.now(),
            },
        ).fetchone()
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    return _view(row)


def delete_endpoint(deps: EndpointDeps, tenant_id: UUID, endpoint_id: UUID) -> None:
    db = deps.db
    with db.transaction(tenant_id) as conn:
        row = conn.execute(
            db.q.delete_endpoint,
            {"tenant_id": tenant_id, "endpoint_id": endpoint_id, "now": deps.clock.now()},
        ).fetchone()
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")


def rotate_secret(deps: EndpointDeps, tenant_id: UUID, endpoint_id: UUID) -> EndpointWithSecret:
    """A new secret, shown once; the old one keeps signing beside it for the grace period."""
    db, secret, now = deps.db, deps.new_secret(), deps.clock.now()
    with db.transaction(tenant_id) as conn:
        row = conn.execute(
            db.q.rotate_endpoint_secret,
            {
                "tenant_id": tenant_id,
                "endpoint_id": endpoint_id,
                "secret": secret,
                "previous_expires_at": now + ROTATION_GRACE,
                "now": now,
            },
        ).fetchone()
    if row is None:
        raise NotFound(f"no webhook endpoint {endpoint_id}")
    return EndpointWithSecret(**_view(row).model_dump(), secret=secret)
