"""What the session's single synth hands to the infrastructure tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from app import cdk_json_context
from stacks.api_stack import ApiStack
from stacks.config import StageConfig
from stacks.data_stack import DataStack
from stacks.delivery_stack import DeliveryStack
from stacks.notifications_stack import NotificationsStack
from stacks.observability_stack import ObservabilityStack
from stacks.ops_stack import OpsStack
from stacks.pipeline_stack import PipelineStack
from stacks.results_stack import ResultsStack
from stacks.worker_stack import WorkerStack

# What makes cdk.json's dev stage a low-idle stage. The session's synth leaves them out, so the template tests
# check the normal shape (proxy, interface endpoints, always-on workers: prod's); test_low_idle.py synthesizes
# dev as configured.
LOW_IDLE_KEYS = frozenset(
    {
        "aurora_min_acu",
        "aurora_auto_pause_seconds",
        "database_proxy",
        "interface_endpoints",
        "tick_minutes",
        "outbox_age_alarm_seconds",
        "jobs_queue_age_alarm_seconds",
        "worker_min_tasks",
    }
)


def normal_shape_stages() -> dict[str, Any]:
    """cdk.json's stages with dev's low-idle settings left to their defaults."""
    stages: dict[str, Any] = dict(cdk_json_context()["stages"])
    stages["dev"] = {key: value for key, value in stages["dev"].items() if key not in LOW_IDLE_KEYS}
    return stages


@dataclass(frozen=True)
class Synthesized:
    app: cdk.App
    config: StageConfig
    outdir: Path
    data_stack: DataStack
    delivery_stack: DeliveryStack
    api_stack: ApiStack
    pipeline_stack: PipelineStack
    notifications_stack: NotificationsStack
    results_stack: ResultsStack
    worker_stack: WorkerStack
    observability_stack: ObservabilityStack
    ops_stack: OpsStack
    # The exception synth raised with validation on (cdk-nag), or None when it passed.
    validation_error: Exception | None
    # cdk.out/validation-report.json of that synth: violations, and suppressed ones with their reasons.
    validation_report: dict[str, Any]


# A stage's synthesized templates as cdk.json configures it: its config and stack concern ("Data", "Worker",
# ...) -> template. Called with the stage's name; each stage is synthesized once per session.
StageTemplates = Callable[[str], tuple[StageConfig, dict[str, dict[str, Any]]]]
