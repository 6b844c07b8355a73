"""The TOKEN authorizer: a policy for the whole API and stage, the tenant in its context, 401 otherwise."""

from uuid import uuid4

import pytest

from tollgate.tenants.authorizer import AccessDenied, authorize_request
from tollgate.tenants.keys import Principal, bearer_token, mint_api_key

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
