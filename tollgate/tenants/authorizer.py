"""The API Gateway TOKEN authorizer's use case: a Bearer key in, an IAM policy with the tenant out."""

from __future__ import annotations

from typing import Any

from tollgate.tenants.keys import ApiKeyResolver, Scope, bearer_token


class AccessDenied(Exception):
    """API Gateway answers 401 when an authorizer raises with the message "Unauthorized"."""

    def __init__(self) -> None:
        super().__init__("Unauthorized")


def authorize_request(
    resolver: ApiKeyResolver, authorization_token: str | None, method_arn: str
) -> dict[str, Any]:
    token = bearer_token(authorization_token)
    principal = resolver.resolve(token) if token else None
    if principal is None:
        raise AccessDenied
    # Allow every method of this API and stage: API Gateway caches the policy per key, so a policy for
    # the one method called would deny the key's next, different call until the cache expires.
    arn_parts = method_arn.split(":", 5)
    api_id, stage = arn_parts[5].split("/")[:2]
    resource = ":".join(arn_parts[:5]) + f":{api_id}/{stage}/*/*"
    policy: dict[str, Any] = {
        "principalId": str(principal.key_id),
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [{"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": resource}],
        },
        # Context values are strings: the scopes go space-separated, as OAuth writes them.
        "context": {
            "tenant_id": str(principal.tenant_id),
            "key_id": str(principal.key_id),
            "scopes": " ".join(sorted(principal.scopes)),
        },
    }
    # API Gateway meters, throttles and caps the tenant by the usage plan under this key. Without one (a
    # tenant not yet synced) a stage that enforces usage plans answers 403; the handler logs it.
    if principal.usage_key is not None:
        policy["usageIdentifierKey"] = principal.usage_key
    return policy


def authorize_websocket(
    resolver: ApiKeyResolver, authorization_header: str | None, method_arn: str
) -> dict[str, Any]:
    """The WebSocket API's $connect: a Bearer key with the ``jobs:read`` scope (notifications say which of the
    tenant's jobs changed), allowed to connect to this API's stage; AccessDenied otherwise. No usage-plan key:
    WebSocket APIs are throttled by their stage, and the tenant's connections by their cap."""
    token = bearer_token(authorization_header)
    principal = resolver.resolve(token) if token else None
    if principal is None or Scope.JOBS_READ not in principal.scopes:
        raise AccessDenied
    arn_parts = method_arn.split(":", 5)
    api_id, stage = arn_parts[5].split("/")[:2]
    return {
        "principalId": str(principal.key_id),
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Action": "execute-api:Invoke",
                    "Effect": "Allow",
                    "Resource": ":".join(arn_parts[:5]) + f":{api_id}/{stage}/*",
                }
            ],
        },
        "context": {"tenant_id": str(principal.tenant_id), "key_id": str(principal.key_id)},
    }
