"""CDK entrypoint: builds one stage's stacks from context and checks them with cdk-nag while synthesizing.

Runs under the CDK CLI (``cdk synth -c stage=prod``) or alone (``python app.py -c stage=prod``), offline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from stacks.api_stack import ApiStack
from stacks.config import REPO_ROOT, StageConfig
from stacks.data_stack import DataStack
from stacks.delivery_stack import DeliveryStack
from stacks.notifications_stack import NotificationsStack
from stacks.observability_stack import ObservabilityStack
from stacks.ops_stack import OpsStack
from stacks.pipeline_stack import PipelineStack
from stacks.results_stack import ResultsStack
from stacks.worker_stack import WorkerStack

CDK_JSON = Path(__file__).resolve().parent / "cdk.json"


def cdk_json_context() -> dict[str, Any]:
    """The ``context`` of cdk.json, which the CLI would pass but a plain ``python app.py`` does not get."""
    context: dict[str, Any] = json.loads(CDK_JSON.read_text())["context"]
    return context


def build_app(
    context: Mapping[str, Any] | None = None, outdir: str | None = None, *, nag: bool = True
) -> cdk.App:
    """All stacks of one stage, with cdk-nag registered; ``context`` overrides cdk.json's.

    ``nag=False`` exists for the template tests alone, to keep inspecting templates after cdk-nag fails.
    """
    app = cdk.App(
        # The CLI tells the app where to write through CDK_OUTDIR; alone, the app writes to ./cdk.out.
        outdir=outdir or os.environ.get("CDK_OUTDIR") or str(REPO_ROOT / "cdk.out"),
        # Context passed here is only a default: the CLI's -c values still take precedence.
        context={**cdk_json_context(), **(context or {})},
    )
    config = StageConfig.from_node(app.node)

    data = DataStack(
        app,
        config.stack_name("Data"),
        config=config,
        description=f"Tollgate {config.stage}: network, Aurora PostgreSQL, RDS Proxy, documents bucket",
    )
    database = {
        "vpc": data.vpc,
        "database_endpoint": data.database_endpoint,
        "database_secret": data.database_secret,
        "database_clients": data.database_clients,
    }
    # Data <- Delivery <- Pipeline <- Api and Worker <- Observability, Results <- Pipeline, and Pipeline and
    # Api <- Notifications: the relay starts webhook deliveries, publishes on the results bus and sends job
    # state changes to the notifications queue, the API nudges the relay and starts replays, the worker and
    # the notifier consume the pipeline's queues, and Observability watches them all; no stack needs anything
    # from one deployed after it, so references only point one way.
    delivery = DeliveryStack(
        app,
        config.stack_name("Delivery"),
        config=config,
        **database,
        description=f"Tollgate {config.stage}: webhook dispatcher state machine and its attempt Lambda",
    )
    # The results bus needs nothing from the others; the relay in Pipeline publishes on it.
    results = ResultsStack(
        app,
        config.stack_name("Results"),
        config=config,
        description=f"Tollgate {config.stage}: results event bus, its archive and an example subscriber",
    )
    pipeline = PipelineStack(
        app,
        config.stack_name("Pipeline"),
        config=config,
        **database,
        webhook_state_machine=delivery.state_machine,
        results_bus=results.bus,
        results_event_source=results.event_source,
        documents_bucket=data.documents_exports,
        description=f"Tollgate {config.stage}: a FIFO queue and DLQ per job type, outbox relay, scheduler",
    )
    api = ApiStack(
        app,
        config.stack_name("Api"),
        config=config,
        **database,
        documents_bucket=data.documents_exports,
        relay_function=pipeline.relay_function,
        webhook_state_machine=delivery.state_machine,
        description=f"Tollgate {config.stage}: public REST API, authorizer, acceptance Lambda",
    )
    notifications = NotificationsStack(
        app,
        config.stack_name("Notifications"),
        config=config,
        **database,
        notifications_queue=pipeline.notifications.queue,
        description=f"Tollgate {config.stage}: live notifications (WebSocket API, connections, notifier)",
    )
    # The WebSocket stage's access log needs the account's API Gateway CloudWatch role, which Api sets (or,
    # with api_gateway_cloudwatch_role off, another stage did); nothing else of Api's is referenced.
    notifications.add_stack_dependency(api, "the account's API Gateway logging role must be set first")
    worker = WorkerStack(
        app,
        config.stack_name("Worker"),
        config=config,
        **database,
        documents_bucket=data.documents_exports,
        job_queues={name: pair.queue for name, pair in pipeline.job_queues.items()},
        relay_function=pipeline.relay_function,
        description=f"Tollgate {config.stage}: ECS Fargate worker, its scaling and the OpenAI key secret",
    )
    # People reach the stage's data only through this function (IAM-authenticated URL, in the VPC); it needs
    # the database from Data, the job queues and DLQs from Pipeline, the dispatcher from Delivery and the
    # usage plan tenants' keys go on from Api.
    OpsStack(
        app,
        config.stack_name("Ops"),
        config=config,
        **database,
        job_queues=pipeline.job_queues,
        webhook_state_machine=delivery.state_machine,
        documents_bucket=data.documents_exports,
        usage_plan=api.usage_plan,
        description=f"Tollgate {config.stage}: the operations function for support and admin commands",
    )
    ObservabilityStack(
        app,
        config.stack_name("Observability"),
        config=config,
        rest_api=api.api,
        api_function=api.api_handler.function,
        authorizer_function=api.authorizer_handler.function,
        scheduler_function=pipeline.scheduler.function,
        job_queues={name: pair.queue for name, pair in pipeline.job_queues.items()},
        dead_letter_queues={name: pair.dead_letters for name, pair in pipeline.job_queues.items()},
        notifications_dead_letters=pipeline.notifications.dead_letters,
        worker_service=worker.service,
        worker_logs=worker.log_group,
        webhook_state_machine=delivery.state_machine,
        webhook_attempt_logs=delivery.attempt.log_group,
        description=f"Tollgate {config.stage}: the alarm topic, every alarm, and the CloudWatch dashboard",
    )

    for key, value in (("project", "tollgate"), ("stage", config.stage)):
        # CDK treats proxy target groups as taggable, CloudFormation's schema does not.
        cdk.Tags.of(app).add(key, value, exclude_resource_types=["AWS::RDS::DBProxyTargetGroup"])
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app


def _parse_context(argv: Sequence[str]) -> dict[str, str]:
    parser = argparse.ArgumentParser(description="Synthesize Tollgate's CloudFormation templates.")
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="context value, as with `cdk synth -c` (e.g. -c stage=prod)",
    )
    args = parser.parse_args(argv)
    pairs = [item.partition("=") for item in args.context]
    if any(not key or not sep for key, sep, _ in pairs):
        parser.error("context values look like KEY=VALUE")
    return {key: value for key, _, value in pairs}


def main(argv: Sequence[str]) -> None:
    build_app(context=_parse_context(argv)).synth()


if __name__ == "__main__":
    main(sys.argv[1:])
