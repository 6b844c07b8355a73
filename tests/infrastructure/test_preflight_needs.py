"""The preflight reads what the stage asks of the account from the same synthesized templates that deploy."""

from __future__ import annotations

import pytest

from stacks.config import StageConfig
from tests.infrastructure.synth import Synthesized
from tollgate_dev.preflight import LAMBDA_MIN_UNRESERVED, stage_needs

pytestmark = pytest.mark.infrastructure


def test_the_preflight_counts_the_relays_and_the_schedulers_reservations(
    synthesized: Synthesized, config: StageConfig
) -> None:
    needs = stage_needs(synthesized.outdir, config.stage)

    # The relay's configured concurrency and the scheduler's one tick at a time (PipelineStack).
    assert needs.reserved_concurrency == config.relay_reserved_concurrency + 1
    assert needs.bootstrap_version >= 6
    assert needs.bootstrap_parameter.startswith("/cdk-bootstrap/")
    # What a new account's default quota of 10 cannot give.
    assert 10 - needs.reserved_concurrency < LAMBDA_MIN_UNRESERVED
