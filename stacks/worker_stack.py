"""WorkerStack: job execution on ECS Fargate, scaled on the scheduler's backlog metrics.

The worker takes signals in from every job type's queue (PipelineStack), claims jobs from PostgreSQL through
RDS Proxy, reads documents and calls the LLM provider. Everything it connects to is passed in by ``app.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.config import (
    REPO_ROOT,
    WORKER_STOP_TIMEOUT_SECONDS,
    StageConfig,
    WorkerService,
    settings_environment,
)
from stacks.constructs.backlog_metrics import (
    OLDEST_ELIGIBLE_JOB_AGE,
    RUNNABLE_JOBS,
    RUNNING_JOBS,
    scheduler_metric,
)
from stacks.constructs.documents_access import DocumentsReadAccess, ExportedDocumentsBucket
from stacks.constructs.entrypoint_function import METRICS_NAMESPACE
from stacks.constructs.nag import acknowledge
from stacks.constructs.service_metrics import WORKER_SERVICE
from tollgate.execution.limiter.dynamodb import KEY as LIMITER_KEY
from tollgate.execution.limiter.dynamodb import TTL_ATTRIBUTE as LIMITER_TTL_ATTRIBUTE

DOCKERFILE = "worker/Dockerfile"
CONTAINER_NAME = "worker"
# Where worker/Dockerfile puts the database CA bundle layers/build.py wrote (WORKDIR /app).
WORKER_DATABASE_CA_BUNDLE = "/app/tollgate-ca/database-ca.pem"
# Fargate's ceiling. On SIGTERM the worker stops claiming and lets its attempts finish for drain_seconds
# (validated to end sooner), then hands the rest back; a task killed anyway loses only leases, which the
# scheduler reaps and retries.
STOP_TIMEOUT = cdk.Duration.seconds(WORKER_STOP_TIMEOUT_SECONDS)
# Behind NAT: the worker is the one piece of Tollgate that calls out of AWS (the LLM provider's API).
EGRESS = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)


class WorkerStack(cdk.Stack):
    """Owns the ECS cluster, the worker services (one per service tier with its own, stage config
    ``worker_tiers``) and their scaling, the provider budget table, and the OpenAI API key secret.

    Exposes ``service`` (the normal tier's), ``services`` and ``log_group``: ObservabilityStack graphs the
    tasks and counts the ERROR lines."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        vpc: ec2.IVpc,
        database_endpoint: str,
        database_secret: secretsmanager.ISecret,
        database_clients: ec2.ISecurityGroup,
        documents_bucket: ExportedDocumentsBucket,
        job_queues: Mapping[str, sqs.IQueue],
        relay_function: lambda_.IFunction,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, env=config.environment, **kwargs)
        self.config = config
        self.documents_bucket = documents_bucket

        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
        )
        # Created with a random placeholder (CloudFormation cannot create a secret without a value); the
        # operator puts the real key, and later deployments leave the value alone.
        self.openai_api_key_name = f"tollgate/{config.stage}/openai-api-key"
        self.openai_api_key = secretsmanager.Secret(
            self,
            "OpenAiApiKey",
            secret_name=self.openai_api_key_name,
            description=(
                "OpenAI API key of the Tollgate worker. Put the key as the plain secret string; the "
                "value created with the stack is a placeholder."
            ),
            removal_policy=config.cdk_removal_policy,
        )
        acknowledge(
            self.openai_api_key,
            "AwsSolutions-SMG4",
            "A third-party API key cannot be rotated by a Secrets Manager rotation Lambda: it is issued in "
            "the OpenAI dashboard, and the operator replaces the secret value when rotating it there.",
        )

        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=config.log_retention_days,
            removal_policy=config.cdk_removal_policy,
        )
        self.limiter_table = dynamodb.Table(
            self,
            "ProviderBudget",
            partition_key=dynamodb.Attribute(name=LIMITER_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            # Permits of workers that died expire by themselves; TTL only sweeps their leftovers.
            time_to_live_attribute=LIMITER_TTL_ATTRIBUTE,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=config.cdk_removal_policy,
        )
        # One service per tier that has its own (stage config ``worker_tiers``); the normal tier's keeps
        # the construct ids it had before tiers, so a deployment adds the others beside it.
        self.services: dict[str, ecs.FargateService] = {}
        self.task_definitions: dict[str, ecs.FargateTaskDefinition] = {}
        for spec in config.worker_services:
            self._tier_service(
                config,
                spec,
                database_endpoint=database_endpoint,
                database_secret=database_secret,
                database_clients=database_clients,
                documents_bucket=documents_bucket,
                job_queues=job_queues,
                relay_function=relay_function,
            )
        self.service = self.services["normal"]
        self.task_definition = self.task_definitions["normal"]

        cdk.CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        cdk.CfnOutput(self, "ServiceName", value=self.service.service_name)
        cdk.CfnOutput(
            self,
            "OpenAiApiKeySecretName",
            # The literal name: the secret's own attribute would render as an ARN-splitting expression.
            value=self.openai_api_key_name,
            description="Put the OpenAI API key here: aws secretsmanager put-secret-value --secret-id <name>",
        )
        cdk.CfnOutput(self, "WorkerLogGroup", value=self.log_group.log_group_name)

    def _tier_service(
        self,
        config: StageConfig,
        spec: WorkerService,
        *,
        database_endpoint: str,
        database_secret: secretsmanager.ISecret,
        database_clients: ec2.ISecurityGroup,
        documents_bucket: ExportedDocumentsBucket,
        job_queues: Mapping[str, sqs.IQueue],
        relay_function: lambda_.IFunction,
    ) -> None:
        """The task definition, service and scaling of one tier's workers."""
        prefix = "" if spec.tier == "normal" else spec.tier.capitalize()
        family = f"tollgate-{config.stage}-worker" + ("" if spec.tier == "normal" else f"-{spec.tier}")
        task_definition = ecs.FargateTaskDefinition(
            self,
            f"{prefix}Task",
            family=family,
            cpu=config.worker_cpu,
            memory_limit_mib=config.worker_memory_mib,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.ARM64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        container = task_definition.add_container(
            CONTAINER_NAME,
            container_name=CONTAINER_NAME,
            image=ecs.ContainerImage.from_asset(
                str(REPO_ROOT),
                file=DOCKERFILE,
                # Built where the tasks run; the repository's .dockerignore admits only the worker's sources
                # and the database CA bundle layers/build.py writes.
                platform=ecr_assets.Platform.LINUX_ARM64,
            ),
            essential=True,
            environment={
                **self._environment(config, spec, database_endpoint, database_secret, job_queues),
                # One provider budget for every task: requests/min, tokens/min and calls in flight.
                "LIMITER_TABLE": self.limiter_table.table_name,
                # A deployed worker refuses to start without its budget table or its provider key.
                "DEPLOYED_STAGE": config.stage,
                # Nudged after each final outcome so the tenant's webhook leaves at once, not at the sweep.
                "RELAY_FUNCTION_NAME": relay_function.function_name,
            },
            # Injected by ECS from Secrets Manager at start: never in the task definition or its API output.
            secrets={"OPENAI_API_KEY": ecs.Secret.from_secrets_manager(self.openai_api_key)},
            logging=ecs.LogDrivers.aws_logs(
                stream_prefix=CONTAINER_NAME,
                log_group=self.log_group,
                # A slow log endpoint must not stall the event loop that heartbeats leases.
                mode=ecs.AwsLogDriverMode.NON_BLOCKING,
                max_buffer_size=cdk.Size.mebibytes(25),
            ),
            stop_timeout=STOP_TIMEOUT,
            # An init process as PID 1 forwards SIGTERM to Python and reaps any child processes.
            linux_parameters=ecs.LinuxParameters(self, f"{prefix}LinuxParameters", init_process_enabled=True),
        )
        acknowledge(
            task_definition,
            "AwsSolutions-ECS2",
            "The environment holds only non-secret settings (resource names, limits, model names), each a "
            "field of WorkerSettings checked at start and by an infrastructure test; the OpenAI key is an "
            "ECS secret and the database password is read from Secrets Manager by the worker itself.",
        )
        self._grant(
            config,
            task_definition=task_definition,
            prefix=prefix,
            database_secret=database_secret,
            documents_bucket=documents_bucket,
            job_queues=job_queues,
        )
        # The unqualified name is what the nudge invokes: the function and $LATEST, no version wildcard.
        relay_function.grant_invoke_latest_version(task_definition.task_role)
        self.limiter_table.grant_read_write_data(task_definition.task_role)

        service = ecs.FargateService(
            self,
            f"{prefix}Service",
            cluster=self.cluster,
            task_definition=task_definition,
            vpc_subnets=EGRESS,
            # The group RDS Proxy and the VPC endpoints admit; its egress is HTTPS (the provider through NAT,
            # AWS through the endpoints) and PostgreSQL to the proxy, nothing else (DataStack).
            security_groups=[database_clients],
            # Outbound only, through NAT: a task is never reachable from the internet.
            assign_public_ip=False,
            # The scaling minimum from the first deployment on; CloudFormation only sets it again when the
            # configured minimum changes, so scaling decisions survive ordinary deployments. A minimum of 0
            # starts with no task: the first job's queue message starts one (_scale_out_from_zero).
            desired_count=spec.min_tasks,
            # A deployment starts new tasks before stopping old ones, so ingress never pauses.
            min_healthy_percent=100,
            max_healthy_percent=200,
            circuit_breaker=ecs.DeploymentCircuitBreaker(enable=True, rollback=True),
            propagate_tags=ecs.PropagatedTagSource.SERVICE,
            enable_execute_command=False,
        )
        self._scale(config, service, spec, job_queues)
        self.services[spec.tier] = service
        self.task_definitions[spec.tier] = task_definition
        if spec.tier == "normal":
            self.container = container
        else:
            cdk.CfnOutput(self, f"{prefix}ServiceName", value=service.service_name)

    def _environment(
        self,
        config: StageConfig,
        spec: WorkerService,
        database_endpoint: str,
        database_secret: secretsmanager.ISecret,
        job_queues: Mapping[str, sqs.IQueue],
    ) -> dict[str, str]:
        """WorkerSettings' fields, except OPENAI_API_KEY (an ECS secret), OPENAI_BASE_URL (OpenAI's own
        endpoint in AWS), WORKER_ID (derived from the task's hostname at start) and DATABASE_ROLE/URL."""
        return {
            "POWERTOOLS_SERVICE_NAME": WORKER_SERVICE,
            "POWERTOOLS_LOG_LEVEL": config.log_level,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            "DATABASE_SECRET_ARN": database_secret.secret_arn,
            "DATABASE_HOST": database_endpoint,
            "DATABASE_CA_BUNDLE": WORKER_DATABASE_CA_BUNDLE,
            # A connection per execution slot, plus ingress and the claim loop; RDS Proxy multiplexes them,
            # and without a proxy each is a server connection (README, "What an idle stage costs").
            "DATABASE_POOL_SIZE": str(spec.execution_slots + 2),
            **config.database_wait_environment(),
            # Every job type's queue: the worker runs a receive loop for each.
            "JOB_QUEUE_URLS": self.to_json_string(
                {name: queue.queue_url for name, queue in job_queues.items()}
            ),
            "DOCUMENTS_BUCKET": self.documents_bucket.bucket_name,
            # The completion budget acceptance estimated each job with; asking for more could overrun it.
            "MAX_OUTPUT_TOKENS": str(config.jobs.max_output_tokens),
            **settings_environment(config.retry),
            **settings_environment(config.worker),
            **settings_environment(config.pricing),
            **settings_environment(config.batch_path),
            # Per service: its tiers, slots and idle wait (the normal service's are the worker section's).
            "EXECUTION_SLOTS": str(spec.execution_slots),
            "CLAIM_IDLE_SECONDS": str(spec.claim_idle_seconds),
            "WORKER_SERVICE_TIERS": ",".join(spec.serves),
        }

    def _grant(
        self,
        config: StageConfig,
        *,
        task_definition: ecs.FargateTaskDefinition,
        prefix: str,
        database_secret: secretsmanager.ISecret,
        documents_bucket: ExportedDocumentsBucket,
        job_queues: Mapping[str, sqs.IQueue],
    ) -> None:
        task_role = task_definition.task_role
        for queue in job_queues.values():
            queue.grant_consume_messages(task_role)
        database_secret.grant_read(task_role)
        DocumentsReadAccess(self, f"{prefix}Documents", documents_bucket=documents_bucket, role=task_role)
        execution_role = task_definition.execution_role
        assert execution_role is not None, "an asset image and an ECS secret give the task an execution role"
        acknowledge(
            execution_role,
            "AwsSolutions-IAM5[Resource::*]",
            "Only ecr:GetAuthorizationToken is granted on '*' (it has no resource-level permissions); the "
            "image pull itself is scoped to the CDK asset repository. An infrastructure test fails if any "
            "other action appears with Resource '*'.",
        )

    def _scale(
        self,
        config: StageConfig,
        service: ecs.FargateService,
        spec: WorkerService,
        job_queues: Mapping[str, sqs.IQueue],
    ) -> None:
        """Step scaling on the scheduler's gauges: backlog size adds tasks fast and idleness removes them
        slowly; the age of the oldest eligible job adds one even when a few slow jobs make a small backlog.

        Evaluation periods are counted in ticks (the gauges' period), so a stage that ticks less often waits
        about as long in time. A service that may stop altogether (``min_tasks`` 0) also starts on a message
        waiting on any jobs queue, and stops its last task only when no job is running either."""
        scaling = service.auto_scale_task_count(min_capacity=spec.min_tasks, max_capacity=spec.max_tasks)
        tick = config.tick_period
        runnable = scheduler_metric(RUNNABLE_JOBS, period=tick)
        backlog = config.worker_scale_out_runnable_jobs
        scaling.scale_on_metric(
            "ScaleOutOnBacklog",
            metric=runnable,
            scaling_steps=[
                appscaling.ScalingInterval(upper=backlog, change=0),
                appscaling.ScalingInterval(lower=backlog, change=1),
                appscaling.ScalingInterval(lower=4 * backlog, change=3),
            ],
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            # New tasks need about a minute to start and the metric comes once a minute.
            cooldown=cdk.Duration.minutes(2),
            evaluation_periods=1,
        )
        idle: cloudwatch.IMetric = runnable
        if spec.min_tasks == 0:
            # Runnable jobs alone reach 0 while the last task still runs a job; stopping it then would hand
            # the attempt back after the drain and retry it.
            idle = cloudwatch.MathExpression(
                expression="runnable + running",
                using_metrics={"runnable": runnable, "running": scheduler_metric(RUNNING_JOBS, period=tick)},
                period=tick,
                label="Runnable and running jobs",
            )
        scaling.scale_on_metric(
            "ScaleInWhenIdle",
            metric=idle,
            scaling_steps=[
                appscaling.ScalingInterval(upper=0, change=-1),
                appscaling.ScalingInterval(lower=0, change=0),
            ],
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            # Ten idle minutes before each step down: bursts come in waves and a stopped task takes up to
            # two minutes to drain its attempts.
            cooldown=cdk.Duration.minutes(5),
            evaluation_periods=_ticks(config, minutes=10),
        )
        age = config.worker_scale_out_job_age_seconds
        scaling.scale_on_metric(
            "ScaleOutOnWait",
            metric=scheduler_metric(OLDEST_ELIGIBLE_JOB_AGE, period=tick),
            scaling_steps=[
                appscaling.ScalingInterval(upper=age, change=0),
                appscaling.ScalingInterval(lower=age, change=1),
            ],
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            cooldown=cdk.Duration.minutes(3),
            evaluation_periods=_ticks(config, minutes=2),
        )
        if spec.min_tasks == 0:
            self._scale_out_from_zero(scaling, job_queues)

    @staticmethod
    def _scale_out_from_zero(scaling: ecs.ScalableTaskCount, job_queues: Mapping[str, sqs.IQueue]) -> None:
        """A task when a message waits on a jobs queue. SQS publishes its queue depth whether or not anything
        consumes the queue, every minute, so a service at zero tasks still hears of the first job within a
        few minutes, without waiting for the scheduler's next tick; a running worker's ingress empties the
        queues within seconds, so this adds nothing while one runs and keeps up."""
        waiting = {
            f"q{index}": queue.metric_approximate_number_of_messages_visible(
                period=cdk.Duration.minutes(1), statistic=cloudwatch.Stats.MAXIMUM
            )
            for index, queue in enumerate(job_queues.values())
        }
        scaling.scale_on_metric(
            "ScaleOutFromZero",
            metric=cloudwatch.MathExpression(
                # A queue that had no message lately publishes nothing; FILL counts it as empty.
                expression=" + ".join(f"FILL({name}, 0)" for name in waiting),
                using_metrics=dict(waiting),
                period=cdk.Duration.minutes(1),
                label="Messages waiting on the jobs queues",
            ),
            scaling_steps=[
                appscaling.ScalingInterval(upper=1, change=0),
                appscaling.ScalingInterval(lower=1, change=1),
            ],
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            # A task takes about a minute to start and consume; then the queues are empty again.
            cooldown=cdk.Duration.minutes(3),
            evaluation_periods=1,
        )


def _ticks(config: StageConfig, *, minutes: int) -> int:
    """Evaluation periods of the scheduler's gauges that span ``minutes`` (at least one tick)."""
    return max(1, math.ceil(minutes / config.tick_minutes))
