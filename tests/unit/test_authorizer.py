"""The TOKEN authorizer: a policy for the whole API and stage, the tenant in its context, 401 otherwise."""

from uuid import uuid4

import pytest

from tollgate.core.errors import InvalidRequest
from tollgate.tenants.authorizer import AccessDenied, authorize_request
from tollgate.tenants.keys import Principal, Scope, bearer_token, mint_api_key, parse_scopes

ARN = "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/POST/extraction-jobs"


class KnownKeys:
    """A resolver that knows a fixed set of keys."""

    def __init__(self, keys: dict[str, Principal]) -> None:
        self.keys = keys
        self.calls: list[str] = []

    def resolve(self, api_key: str) -> Principal | None:
        self.calls.append(api_key)
        return self.keys.get(api_key)


def test_a_known_key_gets_a_policy_for_every_method_with_its_tenant():
    key, principal = mint_api_key(), Principal(uuid4(), uuid4())

    policy = authorize_request(KnownKeys({key: principal}), f"Bearer {key}", ARN)

    statement = policy["policyDocument"]["Statement"][0]
    assert statement["Effect"] == "Allow"
    assert statement["Resource"] == "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/*/*"
    assert policy["context"]["tenant_id"] == str(principal.tenant_id)
    assert policy["principalId"] == str(principal.key_id)


def test_the_context_carries_the_keys_scopes_space_separated():
    key = mint_api_key()
    principal = Principal(uuid4(), uuid4(), frozenset({Scope.JOBS_READ, Scope.REVIEW}))

    policy = authorize_request(KnownKeys({key: principal}), f"Bearer {key}", ARN)

    assert policy["context"]["scopes"] == "jobs:read review"


def test_scopes_are_parsed_strictly():
    assert parse_scopes(["jobs:read", " review "]) == {Scope.JOBS_READ, Scope.REVIEW}
    with pytest.raises(InvalidRequest, match="unknown scope jobs:admin"):
        parse_scopes(["jobs:read", "jobs:admin"])
    with pytest.raises(InvalidRequest, match="at least one scope"):
        parse_scopes([" "])


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic abc", "Bearer not-our-format", "tg_abc"])
def test_malformed_headers_are_denied_without_a_lookup(header):
    resolver = KnownKeys({})
    with pytest.raises(AccessDenied, match="Unauthorized"):
        authorize_request(resolver, header, ARN)
    assert resolver.calls == []


def test_an_unknown_key_is_denied():
    with pytest.raises(AccessDenied):
        authorize_request(KnownKeys({}), f"Bearer {mint_api_key()}", ARN)


def test_keys_are_long_random_and_prefixed():
    keys = {mint_api_key() for _ in range(100)}
    assert len(keys) == 100
    assert all(k.startswith("tg_") and len(k) >= 40 for k in keys)
    assert bearer_token("bearer  tg_x ") == "tg_x"


def _event(authorizer):
    from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEvent

    return APIGatewayProxyEvent({"requestContext": {"authorizer": authorizer}})


def test_a_route_admits_a_key_holding_its_scope_and_refuses_one_without_it():
    from tollgate.api.routes.shared import authenticated_tenant
    from tollgate.core.errors import Forbidden

    tenant_id = uuid4()
    event = _event({"tenant_id": str(tenant_id), "scopes": "jobs:read review"})

    assert authenticated_tenant(event, Scope.JOBS_READ) == tenant_id
    with pytest.raises(Forbidden, match="jobs:write"):
        authenticated_tenant(event, Scope.JOBS_WRITE)


def test_a_context_cached_from_before_scopes_holds_every_scope_as_its_key_does():
    from tollgate.api.routes.shared import authenticated_tenant

    tenant_id = uuid4()
    assert authenticated_tenant(_event({"tenant_id": str(tenant_id)}), Scope.WEBHOOKS_ADMIN) == tenant_id


def test_the_tenants_usage_key_goes_to_api_gateway_for_its_usage_plan():
    key = mint_api_key()
    principal = Principal(uuid4(), uuid4(), usage_key="k" * 40)

    policy = authorize_request(KnownKeys({key: principal}), f"Bearer {key}", ARN)

    assert policy["usageIdentifierKey"] == "k" * 40
    # Not in the context: the API Lambda has no use for it, and access logs record the context.
    assert "k" * 40 not in policy["context"].values()


def test_a_tenant_without_a_usage_key_gets_a_policy_without_one():
    key = mint_api_key()

    policy = authorize_request(KnownKeys({key: Principal(uuid4(), uuid4())}), f"Bearer {key}", ARN)

    assert "usageIdentifierKey" not in policy
