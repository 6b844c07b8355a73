"""The local API Gateway stand-in answers an authorizer that fails (its database away, say) as the deployed
gateway does: 503 problem+json with Retry-After, and the API behind it never runs."""

from __future__ import annotations

import psycopg

from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.gateway import LocalGateway


def test_an_authorizer_failure_is_a_503_with_retry_after_and_the_api_is_not_called():
    called = []

    def authorizer(token, arn):
        raise psycopg.OperationalError("connection refused")

    gateway = LocalGateway(api=lambda event, context: called.append(event), authorizer=authorizer, port=0)
    gateway.start()
    try:
        response = ApiClient(gateway.url, "tg_some_key").request("GET", "/extraction-jobs")
    finally:
        gateway.stop()

    assert response.status == 503
    assert response.header("Retry-After") == "5"
    assert response.header("Content-Type") == "application/problem+json"
    assert response.json["type"].endswith("/dependency-unavailable")
    assert called == []
