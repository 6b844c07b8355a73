"""Chooses the limiter an entrypoint uses from its settings: the budget shared in DynamoDB when a table is
configured, a per-process budget otherwise (local runs only: a deployed worker refuses to start without the
table). The drain benchmark's baselines are the development package's, injected by its own entrypoint. The
Batch API's pool of enqueued tokens is chosen the same way, from the same table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tollgate.core.clock import Clock
from tollgate.execution.limiter.aimd import AimdPolicy
from tollgate.execution.limiter.base import Limiter, TierShares
from tollgate.execution.limiter.batch_pool import BatchPool, DynamoDbBatchPool, InMemoryBatchPool, Limits
from tollgate.execution.limiter.dynamodb import DynamoDbLimiter, derive_shards
from tollgate.execution.limiter.local import InProcessLimiter
from tollgate.settings import LimiterSettings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# Every call waits on the budget, so an unreachable table must fail fast rather than after the SDK's
# default minute of retries; the limiter itself backs off and fails closed (or uses its local allowance).
# Kept as keyword arguments of botocore's Config, built where the client is: wiring imports this module in
# every entrypoint, and botocore's import is a large part of a Lambda's cold start.
LIMITER_CLIENT_CONFIG: dict[str, Any] = {
    "connect_timeout": 1,
    "read_timeout": 2,
    "retries": {"mode": "standard", "max_attempts": 2},
}


def tier_shares(settings: LimiterSettings) -> TierShares:
    return TierShares(
        normal=settings.limiter_share_normal,
        batch=settings.limiter_share_batch,
        recall_seconds=settings.limiter_recall_seconds,
    )


def limiter_client() -> DynamoDBClient:
    """The worker's client of the provider budget's table (only the worker takes budget)."""
    from botocore.config import Config

    from tollgate.core.aws import aws_client

    client: DynamoDBClient = aws_client(
        "dynamodb", entrypoint="worker", config=Config(**LIMITER_CLIENT_CONFIG)
    )
    return client


def build_limiter(settings: LimiterSettings, clock: Clock, dynamodb: DynamoDBClient | None = None) -> Limiter:
    if settings.limiter_table:
        dynamodb = dynamodb or limiter_client()
        rpm, in_flight = settings.provider_requests_per_minute, settings.provider_max_in_flight
        return DynamoDbLimiter(
            dynamodb,
            settings.limiter_table,
            clock,
            requests_per_minute=rpm,
            tokens_per_minute=settings.provider_tokens_per_minute,
            max_in_flight=in_flight,
            shards=derive_shards(rpm, in_flight, settings.limiter_shards),
            permit_ttl_seconds=settings.limiter_permit_ttl_seconds,
            aimd=AimdPolicy(
                decrease_factor=settings.limiter_aimd_decrease, increase_step=settings.limiter_aimd_increase
            ),
            local_allowance_per_minute=settings.limiter_unavailable_allowance_per_minute,
            tier_shares=tier_shares(settings),
        )
    return InProcessLimiter(
        clock,
        requests_per_minute=settings.provider_requests_per_minute,
        tokens_per_minute=settings.provider_tokens_per_minute,
        max_in_flight=settings.provider_max_in_flight,
        permit_ttl_seconds=settings.limiter_permit_ttl_seconds,
        tier_shares=tier_shares(settings),
    )


def build_batch_pool(settings: LimiterSettings, dynamodb: DynamoDBClient | None, clock: Clock) -> BatchPool:
    """The Batch API's enqueued-token pool, in the immediate budget's table when there is one (its items are
    keyed apart); per process otherwise, like the limiter, and for local runs only."""
    limits = Limits(settings.provider_batch_enqueued_tokens, settings.provider_batch_enqueued_tokens_by_model)
    if settings.limiter_table:
        return DynamoDbBatchPool(dynamodb or limiter_client(), settings.limiter_table, clock, limits)
    return InMemoryBatchPool(clock, limits)
