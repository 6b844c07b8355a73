"""What the session's single synth hands to the infrastructure tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from stacks.api_stack import ApiStack
from stacks.config import StageConfig
from stacks.data_stack import DataStack
from stacks.delivery_stack import DeliveryStack
from stacks.observability_stack import ObservabilityStack
from stacks.ops_stack import OpsStack
from stacks.pipeline_stack import PipelineStack
from stacks.results_stack import ResultsStack
from stacks.worker_stack import WorkerStack


@dataclass(frozen=True)
class Synthesized:
    app: cdk.App
    config: StageConfig
    outdir: Path
    data_stack: DataStack
    delivery_stack: DeliveryStack
    api_stack: ApiStack
    pipeline_stack: PipelineStack
    results_stack: ResultsStack
    worker_stack: WorkerStack
    observability_stack: ObservabilityStack
    ops_stack: OpsStack
    # The exception synth raised with validation on (cdk-nag), or None when it passed.
    validation_error: Exception | None
    # cdk.out/validation-report.json of that synth: violations, and suppressed ones with their reasons.
    validation_report: dict[str, Any]
