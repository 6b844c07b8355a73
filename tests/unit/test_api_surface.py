"""The API's HTTP surface is read from the app's own route table: every operation of the OpenAPI document is
in it, a public route says why, and a concrete path finds its operation as API Gateway would."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response

from stacks.config import REPO_ROOT
from tollgate.api.surface import Operation, find_operation, http_surface, needs, public
from tollgate.tenants.keys import Scope


def test_the_surface_holds_every_documented_operation_and_the_public_document():
    document = json.loads((REPO_ROOT / "openapi.json").read_text())
    documented = {
        (method.upper(), path) for path, operations in document["paths"].items() for method in operations
    }
    surface = http_surface()

    assert {(o.method, o.path) for o in surface if o.public is None} == documented
    assert [(o.method, o.path) for o in surface if o.public is not None] == [("GET", "/openapi.json")]


def test_a_route_added_to_the_app_is_in_its_surface_and_a_public_one_carries_its_reason():
    app = APIGatewayRestResolver()
    app.get("/things/<thing_id>")(lambda thing_id: Response(200, "text/plain", thing_id))
    app.get("/status", **public("a load balancer's health check reads it"))(lambda: Response(200))

    assert http_surface(app) == (
        Operation("/status", "GET", "a load balancer's health check reads it"),
        Operation("/things/{thing_id}", "GET"),
    )


def test_every_route_behind_the_authorizer_declares_the_scope_it_needs_and_a_public_one_none():
    surface = http_surface()

    assert [o for o in surface if o.public is None and o.scope is None] == []
    assert [o.scope for o in surface if o.public is not None] == [None]


def test_a_routes_scope_is_read_from_its_declaration_and_documented_as_its_security():
    app = APIGatewayRestResolver()
    app.post("/things", **needs(Scope.JOBS_WRITE))(lambda: Response(202))
    app.get("/things", **needs(Scope.JOBS_READ))(lambda: Response(200))

    assert http_surface(app) == (
        Operation("/things", "GET", scope=Scope.JOBS_READ),
        Operation("/things", "POST", scope=Scope.JOBS_WRITE),
    )
    document = json.loads((REPO_ROOT / "openapi.json").read_text())
    assert document["paths"]["/extraction-jobs"]["post"]["security"] == [{"bearer": ["jobs:write"]}]


def test_a_public_route_must_say_why():
    with pytest.raises(ValueError, match="must say why"):
        public("  ")


SURFACE = (
    Operation("/extraction-jobs", "POST"),
    Operation("/extraction-jobs/{job_id}", "GET"),
    Operation("/extraction-jobs/{job_id}/result", "GET"),
    Operation("/webhook-endpoints/{endpoint_id}/deliveries/{delivery_id}/replay", "POST"),
    Operation("/webhook-endpoints/{endpoint_id}/replay", "POST"),
)


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/extraction-jobs", "/extraction-jobs"),
        ("get", "/extraction-jobs/job_1", "/extraction-jobs/{job_id}"),
        ("GET", "/extraction-jobs/job_1/result", "/extraction-jobs/{job_id}/result"),
        ("POST", "/webhook-endpoints/e/replay", "/webhook-endpoints/{endpoint_id}/replay"),
        (
            "POST",
            "/webhook-endpoints/e/deliveries/d/replay",
            "/webhook-endpoints/{endpoint_id}/deliveries/{delivery_id}/replay",
        ),
        # A method the path does not declare, a path with no resource, an empty parameter, a trailing slash.
        ("DELETE", "/extraction-jobs/job_1", None),
        ("GET", "/extraction-jobs/job_1/attempts", None),
        ("GET", "/extraction-jobs//result", None),
        ("GET", "/extraction-jobs/job_1/", None),
        ("GET", "/", None),
    ],
)
def test_a_concrete_path_finds_its_operation_or_none(method, path, expected):
    found = find_operation(SURFACE, method, path)

    assert (found.path if found else None) == expected
