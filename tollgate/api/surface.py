"""The API's HTTP surface: every method and path it serves, read from the app's own route table.

One source for the deployed stage and the local system: ApiStack makes one API Gateway method per operation
(behind the authorizer unless the route declares itself public, with the reason), and the local gateway
serves exactly these operations, answering any other as API Gateway answers a method it does not declare.
A route added to a router is therefore deployed, authorized and served locally with nothing else to edit.
Every other route declares the key scope it needs (``needs``), which the API checks before it reads the
request (``tollgate.api.app.handle``) and the OpenAPI document states as the operation's security.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from tollgate.tenants.keys import Scope

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver

# The OpenAPI extension a route uses to declare itself public (see ``public``).
PUBLIC_EXTENSION = "x-tollgate-public"
# The OpenAPI security scheme of API keys (Authorization: Bearer <key>); a route's scope is its role name.
BEARER_SCHEME = "bearer"


def public(why: str) -> dict[str, Any]:
    """Route options that serve the route without an API key; ``why`` is recorded where the stack opens it
    (the cdk-nag acknowledgement), so a public route cannot be added without saying why."""
    if not why.strip():
        raise ValueError("a public route must say why it needs no API key")
    return {"openapi_extensions": {PUBLIC_EXTENSION: why}}


def needs(scope: Scope) -> dict[str, Any]:
    """Route options of a route behind the authorizer: the key scope it needs, as its OpenAPI security
    requirement (OpenAPI 3.1 lets a bearer scheme list role names). The API refuses a key without it before
    the request's body or parameters are read, so a key lacking the scope learns nothing about them."""
    return {"security": [{BEARER_SCHEME: [scope.value]}]}


@dataclass(frozen=True, order=True)
class Operation:
    path: str  # API Gateway's form: /extraction-jobs/{job_id}
    method: str
    public: str | None = None  # why it needs no key; None: behind the authorizer
    scope: Scope | None = None  # the key scope it needs (``needs``)

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(part for part in self.path.split("/") if part)


def http_surface(app: APIGatewayRestResolver | None = None) -> tuple[Operation, ...]:
    """Every operation of ``app`` (by default the API as ``create_app`` builds it, with no dependencies:
    routes are read, never called), sorted by path and method."""
    if app is None:
        from tollgate.api.app import create_app
        from tollgate.api.deps import ApiDeps

        app = create_app(cast(ApiDeps, None))
    # Powertools keeps the resolver's routes in these two lists (static paths, then those with parameters);
    # tests/unit/test_api_surface.py checks they hold every operation of the OpenAPI document.
    routes: Iterable[Any] = [*app._static_routes, *app._dynamic_routes]
    operations = {
        Operation(
            path=route.openapi_path,
            method=route.method,
            public=(route.openapi_extensions or {}).get(PUBLIC_EXTENSION),
            scope=_declared_scope(route.security),
        )
        for route in routes
    }
    return tuple(sorted(operations))


def _declared_scope(security: list[dict[str, list[str]]] | None) -> Scope | None:
    """The scope ``needs`` declared, from a route's security requirements."""
    roles = [role for requirement in security or () for role in requirement.get(BEARER_SCHEME, ())]
    if len(roles) > 1:
        raise ValueError(f"a route needs one scope, not {roles}")
    return Scope(roles[0]) if roles else None


_PARAMETER = re.compile(r"\{[^{}/]+\}")


def find_operation(surface: Sequence[Operation], method: str, path: str) -> Operation | None:
    """The operation that serves ``method`` on a concrete ``path``, as API Gateway picks it: a literal
    segment before a parameter, a parameter matching any one non-empty segment; None when there is none."""
    wanted = tuple(path.removeprefix("/").split("/")) if path != "/" else ()
    if not path.startswith("/") or "" in wanted:
        return None  # API Gateway has no resource with an empty segment ("//", a trailing "/")
    best: tuple[int, Operation] | None = None
    for operation in surface:
        if operation.method != method.upper() or len(operation.segments) != len(wanted):
            continue
        literal = 0
        for template, segment in zip(operation.segments, wanted, strict=True):
            if _PARAMETER.fullmatch(template):
                continue
            if template != segment:
                break
            literal += 1
        else:
            if best is None or literal > best[0]:
                best = (literal, operation)
    return best[1] if best is not None else None
