"""`tollgate tenants` as an operator runs it against real PostgreSQL: every tenant at a glance, a tenant's keys
as JSON for scripts, and a revocation that says how long the key may still be admitted, with the number
the authorizer's own setting gives."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from typer.testing import CliRunner

from tollgate.cli.main import app
from tollgate.core.clock import new_id
from tollgate.tenants.keys import create_key, parse_scopes
from tollgate.usage.service import set_monthly_budget

pytestmark = pytest.mark.integration


@pytest.fixture
def operator(monkeypatch, stack, clean_db, tmp_path):
    """A shell that names the database, with the authorizer's key cache at its default."""
    monkeypatch.setenv("DATABASE_URL", clean_db)
    monkeypatch.delenv("API_KEY_CACHE_TTL_SECONDS", raising=False)

    def run(*args: str):
        return CliRunner().invoke(app, [*args, "--data-dir", str(tmp_path)], env={"COLUMNS": "200"})

    return run


def test_tenants_list_shows_each_tenant_with_its_keys_endpoints_and_own_settings(
    operator, make_tenant, system_db
):
    acme = make_tenant("acme")
    globex = make_tenant("globex")
    create_key(system_db, globex.tenant_id, new_id, scopes=parse_scopes(["jobs:read"]))
    set_monthly_budget(system_db, globex.tenant_id, Decimal("250.00"))
    hook = globex.client.request("POST", "/webhook-endpoints", json_body={"url": "https://erp.example.com/h"})
    assert hook.status == 201, hook.body

    table = operator("tenants", "list")
    listed = json.loads(operator("tenants", "list", "-o", "json").stdout)

    assert table.exit_code == 0, table.output
    assert str(acme.tenant_id) in table.stdout and str(globex.tenant_id) in table.stdout
    assert [(t["name"], t["live_keys"], t["webhook_endpoints"]) for t in listed] == [
        ("acme", 1, 0),
        ("globex", 2, 1),
    ]
    assert (listed[1]["tenant_id"], listed[1]["monthly_budget_usd"]) == (str(globex.tenant_id), "250.000000")
    assert listed[0]["retention_days"] is None and listed[0]["monthly_budget_usd"] is None


def test_keys_list_takes_the_output_flag_every_list_takes(operator, tenant, system_db):
    key = create_key(system_db, tenant.tenant_id, new_id, scopes=parse_scopes(["review"]))

    listed = operator("tenants", "keys", "list", "acme", "--output", "json")

    assert listed.exit_code == 0, listed.output
    keys = json.loads(listed.stdout)
    assert keys[0]["key_id"] == str(key.key_id), "newest first"
    assert keys[0]["scopes"] == ["review"] and keys[0]["revoked_at"] is None
    assert all(set(k) == {"key_id", "key_prefix", "scopes", "created_at", "revoked_at"} for k in keys)


@pytest.mark.parametrize(("setting", "seconds"), [(None, 60), ("17", 17)], ids=["default", "set"])
def test_a_revocation_says_how_long_the_key_may_still_be_admitted(
    operator, tenant, system_db, monkeypatch, setting, seconds
):
    if setting is not None:
        monkeypatch.setenv("API_KEY_CACHE_TTL_SECONDS", setting)
    key = create_key(system_db, tenant.tenant_id, new_id, scopes=parse_scopes(["jobs:read"]))

    revoked = operator("tenants", "keys", "revoke", "acme", str(key.key_id))

    assert revoked.exit_code == 0, revoked.output
    assert f"key {key.key_id} of acme revoked" in revoked.stdout
    assert f"It keeps working for up to {seconds} s more" in revoked.stderr
    assert f"API_KEY_CACHE_TTL_SECONDS={seconds}" in revoked.stderr
