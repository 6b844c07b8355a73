"""The preflight reads what the stage asks of the account from the same synthesized templates that deploy."""

from __future__ import annotations

import pytest

from tests.infrastructure.synth import StageSynth
from tollgate_dev.preflight import LAMBDA_MIN_UNRESERVED, stage_needs

pytestmark = pytest.mark.infrastructure

# A new account's Lambda quota (Concurrent executions).
NEW_ACCOUNT_QUOTA = 10


def test_the_preflight_counts_each_stages_reservations(each_stage: StageSynth) -> None:
    config = each_stage.config
    needs = stage_needs(each_stage.outdir, config.stage)

    # The relay's and the scheduler's reservations (PipelineStack), as the stage's settings give them.
    assert (
        needs.reserved_concurrency
        == config.relay_reserved_concurrency + config.scheduler_reserved_concurrency
    )
    assert needs.bootstrap_version >= 6
    assert needs.bootstrap_parameter.startswith("/cdk-bootstrap/")
    if needs.reserved_concurrency:
        # What a new account's quota cannot give: the preflight tells such a stage which quota to raise.
        assert NEW_ACCOUNT_QUOTA - needs.reserved_concurrency < LAMBDA_MIN_UNRESERVED
