"""NotificationsStack: live notifications (DESIGN §8), a WebSocket API telling tenants' clients a job changed.

It owns the WebSocket API and its stage, the $connect authorizer, the route Lambda, the connections table and
the notifier, which PipelineStack's notifications queue runs. The alarm on that queue's dead letters watches
it from ObservabilityStack.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.config import StageConfig, settings_environment
from stacks.constructs.database_wakes import wakes_database_while_clients_connected
from stacks.constructs.entrypoint_function import EntrypointFunction
from stacks.constructs.lambda_packaging import DependenciesLayer, function_code, lambda_database_environment
from stacks.constructs.nag import acknowledge
from stacks.constructs.notification_queue import NOTIFIER_TIMEOUT
from tollgate.notify.connections import BY_TENANT_INDEX, CONNECTION_ID, TENANT_ID, TTL_ATTRIBUTE

STAGE_NAME = "v1"
# The connections table's schema, as tollgate/notify/connections.py reads and writes it.
# The table's schema is the runtime's (tollgate.notify.connections): one source for both.
CONNECTION_KEY = CONNECTION_ID
TENANT_KEY = TENANT_ID
TENANT_INDEX = BY_TENANT_INDEX
# The contract's header: `Authorization: Bearer <key>`, checked once per connection, at $connect.
IDENTITY_SOURCE = "route.request.header.Authorization"
ROUTES = ("$connect", "$disconnect", "subscribe", "$default")
# API Gateway ends a WebSocket integration after 29 s; the route Lambda answers first, so the client gets our
# error message rather than a gateway's.
ROUTE_TIMEOUT = cdk.Duration.seconds(25)
# How often the notifier sweeps for connections whose API key was revoked.
SWEEP_PERIOD = cdk.Duration.minutes(1)
# FIFO event sources take at most ten messages a batch; each names a tenant, and one catch-up serves them all.
NOTIFIER_BATCH_SIZE = 10

# One JSON line per connect, message and disconnect; never a message body (it may hold job ids of tenants).
ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "extendedRequestId": "$context.extendedRequestId",
    "connectionId": "$context.connectionId",
    "eventType": "$context.eventType",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "requestTimeEpoch": "$context.requestTimeEpoch",
    "sourceIp": "$context.identity.sourceIp",
    "principalId": "$context.authorizer.principalId",
    "error": "$context.error.message",
    "integrationLatency": "$context.integrationLatency",
}


class NotificationsStack(cdk.Stack):
    """Exposes ``api`` and ``stage`` (the WebSocket API and its ``wss://`` endpoint), ``connections`` (the
    table), ``route_handler``, ``authorizer_handler`` and ``notifier``."""

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
        notifications_queue: sqs.IQueue,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, env=config.environment, **kwargs)
        self.config = config
        code = function_code()
        layer = DependenciesLayer(self, "Dependencies", layer_dir=config.layer_dir).layer
        common: dict[str, Any] = {
            "config": config,
            "code": code,
            "layer": layer,
            "vpc": vpc,
            "security_groups": [database_clients],
        }
        database_environment = lambda_database_environment(
            config, database_secret.secret_arn, database_endpoint
        )

        self.connections = dynamodb.Table(
            self,
            "Connections",
            partition_key=dynamodb.Attribute(name=CONNECTION_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            # A connection whose $disconnect never arrived (API Gateway does not promise one) goes by itself.
            time_to_live_attribute=TTL_ATTRIBUTE,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=config.cdk_removal_policy,
        )
        # The notifier finds a tenant's connections, and $connect counts them against the tenant's cap.
        self.connections.add_global_secondary_index(
            index_name=TENANT_INDEX,
            partition_key=dynamodb.Attribute(name=TENANT_KEY, type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.ALL,
        )

        self.api = apigwv2.WebSocketApi(
            self,
            "Api",
            api_name=f"tollgate-{config.stage}-notifications",
            description="Tollgate live notifications: job state changes pushed to tenants' clients",
            # The messages' "action" field picks the route; anything else lands on $default.
            route_selection_expression="$request.body.action",
        )
        self.stage = self._stage(config)
        # The management endpoint (https://.../v1) the route Lambda and the notifier post to connections on.
        notify_environment = {
            **database_environment,
            "CONNECTIONS_TABLE": self.connections.table_name,
            "WEBSOCKET_ENDPOINT": self.stage.callback_url,
            **config.notifications.function_environment(),
        }

        self.authorizer_handler = EntrypointFunction(
            self,
            "AuthorizerHandler",
            entrypoint="websocket_authorizer",
            description="Tollgate WebSocket $connect authorizer: the tenant's API key with scope jobs:read",
            environment={**database_environment, **settings_environment(config.authorizer)},
            # A key not in its cache is looked up in PostgreSQL, which may first have to resume.
            timeout=cdk.Duration.seconds(25 if config.auto_pause else 10),
            **common,
        )
        self.route_handler = EntrypointFunction(
            self,
            "RouteHandler",
            entrypoint="websocket",
            description="Tollgate WebSocket routes: connect (per-tenant cap), disconnect, subscribe (replay)",
            environment=notify_environment,
            timeout=ROUTE_TIMEOUT,
            **common,
        )
        self.notifier = EntrypointFunction(
            self,
            "Notifier",
            entrypoint="notifier",
            description="Tollgate notifier: posts each tenant's new job state changes to its connections",
            environment=notify_environment,
            # The notifications queue's visibility timeout is derived from this one (notification_queue.py).
            timeout=NOTIFIER_TIMEOUT,
            **common,
        )
        # The route Lambda and the notifier run behind NAT (stacks.reach): they post to connections, whose
        # management API has no VPC endpoint, and the DynamoDB gateway endpoint is routed from there alone.

        self._routes()
        self._grant(database_secret, notifications_queue)
        self._acknowledge_findings()

        cdk.CfnOutput(self, "WebSocketUrl", value=self.stage.url)
        cdk.CfnOutput(self, "ConnectionsTableName", value=self.connections.table_name)

    def _stage(self, config: StageConfig) -> apigwv2.WebSocketStage:
        """The one stage: deployed on every change, throttled stage-wide, access-logged.

        Logging goes through the account's API Gateway CloudWatch role, which ApiStack sets (app.py deploys
        this stack after it).
        """
        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=config.log_retention_days,
            removal_policy=config.cdk_removal_policy,
        )
        stage = apigwv2.WebSocketStage(
            self,
            "Stage",
            web_socket_api=self.api,
            stage_name=STAGE_NAME,
            auto_deploy=True,
            # The default route settings, so $connect, subscribe and every message share one stage-wide
            # budget; the per-tenant bound is the connection cap the route Lambda enforces.
            throttle=apigwv2.ThrottleSettings(
                rate_limit=config.notifications.throttle_rate,
                burst_limit=config.notifications.throttle_burst,
            ),
        )
        cfn_stage = stage.node.default_child
        assert isinstance(cfn_stage, apigwv2.CfnStage)
        cfn_stage.access_log_settings = apigwv2.CfnStage.AccessLogSettingsProperty(
            destination_arn=self.access_logs.log_group_arn, format=json.dumps(ACCESS_LOG_FIELDS)
        )
        return stage

    def _routes(self) -> None:
        """Every route to the one route Lambda, which routes by ``requestContext.routeKey`` itself; only
        $connect is authorized: API Gateway runs a WebSocket authorizer there alone, and later messages travel
        on the connection it admitted."""
        authorizer = authorizers.WebSocketLambdaAuthorizer(
            "ApiKeyAuthorizer", self.authorizer_handler.function, identity_source=[IDENTITY_SOURCE]
        )
        for route_key in ROUTES:
            route = self.api.add_route(
                route_key,
                integration=integrations.WebSocketLambdaIntegration(
                    f"{route_id(route_key)}Integration", self.route_handler.function, timeout=ROUTE_TIMEOUT
                ),
                authorizer=authorizer if route_key == "$connect" else None,
            )
            if route_key != "$connect":
                acknowledge(
                    route,
                    "AwsSolutions-APIG4",
                    f"{route_key} rides a connection that $connect's Lambda authorizer admitted with the "
                    "tenant's API key; API Gateway runs WebSocket authorizers on $connect only, and the "
                    "route Lambda takes the tenant from the connection's record, never from the message.",
                )

    def _grant(self, database_secret: secretsmanager.ISecret, notifications_queue: sqs.IQueue) -> None:
        for handler in (self.authorizer_handler, self.route_handler, self.notifier):
            database_secret.grant_read(handler.function)
        for function in (self.route_handler.function, self.notifier.function):
            self.connections.grant_read_write_data(function)
            # PostToConnection, GetConnection and DeleteConnection on this stage's connections only.
            self.stage.grant_management_api_access(function)
        # A revoked key's connections are closed by a sweep (connections that get no events are never looked
        # at otherwise): every minute, each key unchecked for KEY_CHECK_SECONDS is checked again.
        self.notifier.function.configure_async_invoke(max_event_age=SWEEP_PERIOD, retry_attempts=0)
        sweep = events.Rule(
            self.notifier,
            "SweepEveryMinute",
            description=f"Tollgate {self.config.stage}: closes connections whose API key was revoked",
            schedule=events.Schedule.rate(SWEEP_PERIOD),
            targets=[
                targets.LambdaFunction(
                    self.notifier.function,
                    event=events.RuleTargetInput.from_object({"source": "tollgate.sweep-connections"}),
                )
            ],
        )
        # The sweep lists the due connections from DynamoDB and reads PostgreSQL only for their keys, and the
        # notifier's pool connects only when asked (build_notify): with no client connected, a run leaves a
        # paused cluster paused. With one, its key is read once per KEY_CHECK_SECONDS, at most once a run.
        key_check_seconds = self.config.notifications.key_check_seconds
        wakes_database_while_clients_connected(
            sweep, at_most_every=cdk.Duration.seconds(max(SWEEP_PERIOD.to_seconds(), key_check_seconds))
        )
        # Failed tenants of a batch come back alone (partial batch responses); the rest are not repeated.
        self.notifier.function.add_event_source(
            event_sources.SqsEventSource(
                notifications_queue,
                batch_size=NOTIFIER_BATCH_SIZE,
                report_batch_item_failures=True,
                max_concurrency=self.config.notifications.notifier_max_concurrency,
            )
        )

    def _acknowledge_findings(self) -> None:
        table = self.connections.node.default_child
        assert isinstance(table, dynamodb.CfnTable)
        reasons = {
            f"Resource::<{self.get_logical_id(table)}.Arn>/index/*": (
                "From grant_read_write_data on the connections table: its one index, by_tenant, is how a "
                "tenant's connections are found; the statement names only this table."
            ),
            f"Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:"
            f"<{self.get_logical_id(self._cfn_api())}>/{STAGE_NAME}/*/@connections/*": (
                "From grant_management_api_access on the stage: post, read and delete (the methods of "
                "@connections) on connection ids API Gateway makes at each $connect; the grant covers this "
                "one stage's @connections and no other API's."
            ),
        }
        for function in (self.route_handler.function, self.notifier.function):
            role = function.role
            assert role is not None
            for finding, reason in reasons.items():
                acknowledge(role, f"AwsSolutions-IAM5[{finding}]", reason)

    def _cfn_api(self) -> apigwv2.CfnApi:
        cfn_api = self.api.node.default_child
        assert isinstance(cfn_api, apigwv2.CfnApi)
        return cfn_api


def route_id(route_key: str) -> str:
    """``$connect`` -> ``Connect``, ``subscribe`` -> ``Subscribe``: a route's part of construct ids."""
    return route_key.removeprefix("$").capitalize()
