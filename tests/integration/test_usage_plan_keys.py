"""Tenants' usage-plan keys: made once on the stage's usage plan (moto's API Gateway over HTTP), stored with
the tenant, handed to API Gateway by the authorizer; none locally, where there is no usage plan."""

from __future__ import annotations

from uuid import uuid4

import boto3
import pytest

from tollgate.core.clock import SystemClock, new_id
from tollgate.core.errors import InvalidRequest
from tollgate.db import Database
from tollgate.tenants.authorizer import authorize_request
from tollgate.tenants.keys import ApiKeyResolver, create_tenant
from tollgate.tenants.usage_keys import ApiGatewayUsagePlan, NoUsagePlan, sync_usage_keys, usage_key_name
from tollgate_dev.local.aws import LocalAws

pytestmark = pytest.mark.integration

ARN = "arn:aws:execute-api:eu-west-1:123456789012:abc123/v1/POST/extraction-jobs"


@pytest.fixture
def apigateway(local_aws: LocalAws):
    return boto3.client("apigateway")


@pytest.fixture
def plan_id(apigateway) -> str:
    return str(apigateway.create_usage_plan(name=f"tenants-{uuid4()}")["id"])


def _plan_key_ids(apigateway, plan_id: str) -> list[str]:
    return [item["id"] for item in apigateway.get_usage_plan_keys(usagePlanId=plan_id)["items"]]


def _keys_named(apigateway, name: str) -> list[dict]:
    return [
        k for k in apigateway.get_api_keys(nameQuery=name, includeValues=True)["items"] if k["name"] == name
    ]


def test_a_new_tenant_gets_one_key_on_the_plan_and_the_authorizer_names_it(
    apigateway, plan_id, app_db: Database, system_db: Database, clean_db: str
):
    # Given a stage with a usage plan
    usage_plan = ApiGatewayUsagePlan(apigateway, plan_id)

    # When a tenant is created
    tenant = create_tenant(system_db, "acme", new_id, usage_plan=usage_plan)

    # Then its key is on the plan, and the authorizer meters the tenant's calls by it
    (key,) = _keys_named(apigateway, usage_key_name(tenant.tenant_id))
    assert tenant.usage_key_id == key["id"]
    assert _plan_key_ids(apigateway, plan_id) == [key["id"]]
    resolver = ApiKeyResolver(app_db, SystemClock(), ttl_seconds=0)
    policy = authorize_request(resolver, f"Bearer {tenant.api_key}", ARN)
    assert policy["usageIdentifierKey"] == key["value"]


def test_attaching_again_finds_the_same_key_instead_of_making_another(apigateway, plan_id):
    usage_plan = ApiGatewayUsagePlan(apigateway, plan_id)
    tenant_id = uuid4()

    first = usage_plan.attach(tenant_id, "acme")
    again = usage_plan.attach(tenant_id, "acme")

    assert first == again
    assert len(_keys_named(apigateway, usage_key_name(tenant_id))) == 1


def test_a_key_made_but_not_yet_on_the_plan_is_put_on_it(apigateway, plan_id):
    # Given a key an earlier attempt made before it failed to add it to the plan
    tenant_id = uuid4()
    made = apigateway.create_api_key(name=usage_key_name(tenant_id), enabled=True)

    key = ApiGatewayUsagePlan(apigateway, plan_id).attach(tenant_id, "acme")

    assert key is not None and key.key_id == made["id"]
    assert _plan_key_ids(apigateway, plan_id) == [made["id"]]


def test_a_taken_name_makes_no_key_in_api_gateway(apigateway, plan_id, system_db: Database, clean_db: str):
    usage_plan = ApiGatewayUsagePlan(apigateway, plan_id)
    create_tenant(system_db, "acme", new_id, usage_plan=usage_plan)

    with pytest.raises(InvalidRequest, match="already exists"):
        create_tenant(system_db, "acme", new_id, usage_plan=usage_plan)

    assert len(_plan_key_ids(apigateway, plan_id)) == 1


def test_locally_a_tenant_has_no_usage_key_and_the_authorizer_names_none(
    app_db: Database, system_db: Database, clean_db: str
):
    tenant = create_tenant(system_db, "acme", new_id, usage_plan=NoUsagePlan())

    resolver = ApiKeyResolver(app_db, SystemClock(), ttl_seconds=0)
    policy = authorize_request(resolver, f"Bearer {tenant.api_key}", ARN)

    assert tenant.usage_key_id is None
    assert "usageIdentifierKey" not in policy
    assert policy["context"]["tenant_id"] == str(tenant.tenant_id)


def test_sync_gives_tenants_made_without_a_plan_their_key_once(
    apigateway, plan_id, app_db: Database, system_db: Database, clean_db: str
):
    # Given tenants made before the stage had usage-plan keys, and one made after
    old = [create_tenant(system_db, name, new_id) for name in ("acme", "globex")]
    usage_plan = ApiGatewayUsagePlan(apigateway, plan_id)
    recent = create_tenant(system_db, "initech", new_id, usage_plan=usage_plan)

    # When the backfill runs, twice
    synced = sync_usage_keys(system_db, usage_plan)
    again = sync_usage_keys(system_db, usage_plan)

    # Then each old tenant got one key on the plan, and the second run had nothing to do
    assert sorted(synced) == sorted(t.tenant_id for t in old)
    assert again == []
    assert len(_plan_key_ids(apigateway, plan_id)) == 3
    resolver = ApiKeyResolver(app_db, SystemClock(), ttl_seconds=0)
    for tenant in [*old, recent]:
        (key,) = _keys_named(apigateway, usage_key_name(tenant.tenant_id))
        assert (
            authorize_request(resolver, f"Bearer {tenant.api_key}", ARN)["usageIdentifierKey"] == key["value"]
        )


def test_sync_without_a_plan_changes_nothing(system_db: Database, clean_db: str):
    create_tenant(system_db, "acme", new_id)

    assert sync_usage_keys(system_db, NoUsagePlan()) == []


def test_the_cli_makes_the_key_with_usage_plan_id_and_backfills_the_others(
    apigateway, plan_id, system_db: Database, clean_db: str, monkeypatch, tmp_path
):
    from typer.testing import CliRunner

    from tollgate.cli.main import app

    monkeypatch.setenv("DATABASE_URL", clean_db)

    def cli(*args: str):
        return CliRunner().invoke(app, [*args, "--data-dir", str(tmp_path)])

    # Without USAGE_PLAN_ID (local development) a tenant is made without a key, and says so
    local = cli("tenants", "create", "acme")
    assert local.exit_code == 0, local.output
    assert "no USAGE_PLAN_ID" in local.stderr
    assert cli("tenants", "sync-usage-keys").exit_code == 2
    assert _plan_key_ids(apigateway, plan_id) == []

    # With it, a new tenant gets its key, and the backfill gives acme one
    monkeypatch.setenv("USAGE_PLAN_ID", plan_id)
    deployed = cli("tenants", "create", "globex")
    assert deployed.exit_code == 0, deployed.output
    assert "no USAGE_PLAN_ID" not in deployed.stderr
    assert len(_plan_key_ids(apigateway, plan_id)) == 1
    synced = cli("tenants", "sync-usage-keys")
    assert synced.exit_code == 0, synced.output
    assert synced.stdout.startswith("1 tenant(s)")
    assert len(_plan_key_ids(apigateway, plan_id)) == 2
