"""What the session's single synth hands to the infrastructure tests."""

from __future__ import annotations

import fcntl
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from app import build_app, cdk_json_context
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


@dataclass(frozen=True)
class StageSynth:
    """One stage of cdk.json exactly as configured, synthesized on its own (``each_stage``)."""

    config: StageConfig
    # The cloud assembly, as `make synth` and the preflight read it.
    outdir: Path
    # Stack concern ("Pipeline", "Api", ...) -> template.
    templates: dict[str, dict[str, Any]]


def synthesize_shared(stage: str, root: Path) -> StageSynth:
    """``stage`` as cdk.json configures it, synthesized into ``root/stage`` by the first process to ask and read
    back by every other (a file lock keeps them in turn), so the test workers of one run synthesize each
    stage once between them. Without cdk-nag (see ``stage_synth``)."""
    root.mkdir(parents=True, exist_ok=True)
    outdir, layer_dir = root / stage, root / f"{stage}.layer"
    context = {"stage": stage, "layer_dir": str(layer_dir)}
    with (root / f"{stage}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / f"{stage}.done").exists():
            shutil.rmtree(outdir, ignore_errors=True)
            layer_dir.mkdir(exist_ok=True)
            build_app(context=context, outdir=str(outdir), nag=False).synth()
            (root / f"{stage}.done").touch()
    # The stage's settings, without synthesizing again: they are read from the app's context alone.
    config = StageConfig.from_node(cdk.App(context={**cdk_json_context(), **context}).node)
    manifest = json.loads((outdir / "manifest.json").read_text())
    templates = {
        name.removeprefix(f"Tollgate-{stage}-"): json.loads(
            (outdir / artifact["properties"]["templateFile"]).read_text()
        )
        for name, artifact in manifest["artifacts"].items()
        if artifact["type"] == "aws:cloudformation:stack"
    }
    return StageSynth(config=config, outdir=outdir, templates=templates)
