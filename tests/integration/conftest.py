"""Integration fixtures: the local system (real PostgreSQL, moto over HTTP, the API behind the local
gateway on 127.0.0.1) and tenants with API keys."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import pytest
from pydantic import SecretStr

from tests.support import PUBLIC_V4, FakeResolver
from tollgate.core.clock import new_id
from tollgate.db import Database, build_database
from tollgate.delivery.ssrf import Resolver
from tollgate.settings import DatabaseSettings
from tollgate.tenants.keys import create_tenant
from tollgate_dev.local.aws import LocalAws
from tollgate_dev.local.client import ApiClient
from tollgate_dev.local.gateway import BODY_READ_TIMEOUT_SECONDS
from tollgate_dev.local.runtime import LocalStack

pytestmark = pytest.mark.integration

# The job protocol's machine is a helper module that two test files share: its asserts report the values they
# compared, as a test module's do (and as the planted-bug hunts' expected reports rely on).
pytest.register_assert_rewrite("tests.integration.job_protocol")


@pytest.fixture(scope="session")
def local_aws() -> Iterator[LocalAws]:
    aws = LocalAws()
    aws.start()
    yield aws
    aws.stop()


def _start_stack(
    database_url: str,
    local_aws: LocalAws,
    *,
    webhook_resolver: Resolver | None = None,
    gateway_body_read_timeout: float = BODY_READ_TIMEOUT_SECONDS,
    **api_overrides: Any,
) -> LocalStack:
    stack = LocalStack(
        port=0,
        gateway_body_read_timeout=gateway_body_read_timeout,
        database_url=database_url,
        aws=local_aws,
        api_overrides=api_overrides,
        pipeline=False,
        # No test asks the real DNS: unless a test brings its own, every name is one public address.
        webhook_resolver=webhook_resolver or FakeResolver(default=[PUBLIC_V4]),
    )
    return stack.start()


@pytest.fixture(scope="session")
def session_stack(database_url: str, local_aws: LocalAws) -> Iterator[LocalStack]:
    stack = _start_stack(database_url, local_aws)
    yield stack
    stack.stop()


@pytest.fixture
def stack_factory(database_url: str, local_aws: LocalAws) -> Iterator[Callable[..., LocalStack]]:
    """Stacks with other settings for one test; stopped after it, so their connections do not pile up."""
    stacks: list[LocalStack] = []

    def start(
        *,
        webhook_resolver: Resolver | None = None,
        gateway_body_read_timeout: float = BODY_READ_TIMEOUT_SECONDS,
        **api_overrides: Any,
    ) -> LocalStack:
        stacks.append(
            _start_stack(
                database_url,
                local_aws,
                webhook_resolver=webhook_resolver,
                gateway_body_read_timeout=gateway_body_read_timeout,
                **api_overrides,
            )
        )
        return stacks[-1]

    yield start
    for stack in stacks:
        stack.stop()


@pytest.fixture
def stack(session_stack: LocalStack, clean_db: str) -> LocalStack:
    return session_stack


@pytest.fixture(scope="session")
def system_db(database_url: str) -> Iterator[Database]:
    db = build_database(
        DatabaseSettings(database_url=SecretStr(database_url), database_role="tollgate_system")
    )
    yield db
    db.close()


@pytest.fixture(scope="session")
def app_db(database_url: str) -> Iterator[Database]:
    db = build_database(DatabaseSettings(database_url=SecretStr(database_url)))
    yield db
    db.close()


@dataclass
class Tenant:
    tenant_id: UUID
    api_key: str
    client: ApiClient


@pytest.fixture
def make_tenant(stack: LocalStack, system_db: Database) -> Callable[..., Tenant]:
    counter = iter(range(1_000_000))

    def make(name: str | None = None, base_url: str | None = None) -> Tenant:
        created = create_tenant(system_db, name or f"tenant-{next(counter)}", new_id)
        return Tenant(
            created.tenant_id, created.api_key, ApiClient(base_url or stack.api_url, created.api_key)
        )

    return make


@pytest.fixture
def tenant(make_tenant: Callable[..., Tenant]) -> Tenant:
    return make_tenant("acme")
