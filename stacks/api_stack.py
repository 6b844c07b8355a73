"""ApiStack: the public REST API, its API-key authorizer and the acceptance Lambda behind it.

Everything the stack connects to (VPC, proxy, secret, bucket) is passed in by ``app.py`` from DataStack, the
outbox relay it nudges from PipelineStack, and the webhook dispatcher it starts replays on from DeliveryStack.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.config import WAF_RATE_WINDOW_SECONDS, StageConfig, settings_environment
from stacks.constructs.api_firewall import ApiFirewall
from stacks.constructs.documents_access import ExportedDocumentsBucket
from stacks.constructs.entrypoint_function import EntrypointFunction
from stacks.constructs.lambda_packaging import DependenciesLayer, function_code, lambda_database_environment
from stacks.constructs.nag import acknowledge
from stacks.constructs.problem_responses import ProblemGatewayResponses
from tollgate.api.surface import http_surface

STAGE_NAME = "v1"
# A bearer token with no whitespace; anything else is refused by API Gateway without invoking the authorizer.
AUTHORIZATION_PATTERN = r"^[Bb][Ee][Aa][Rr][Ee][Rr] [^\s]+$"
F = apigw.AccessLogField
ACCESS_LOG_FIELDS = {
    "requestId": F.context_request_id(),
    "requestTime": F.context_request_time(),
    "sourceIp": F.context_identity_source_ip(),
    "httpMethod": F.context_http_method(),
    "resourcePath": F.context_resource_path(),
    "status": F.context_status(),
    "protocol": F.context_protocol(),
    "responseLength": F.context_response_length(),
    "responseLatency": F.context_response_latency(),
    "integrationLatency": F.context_integration_latency(),
    "integrationStatus": F.context_integration_status(),
    # The tenant and key as resolved by the authorizer, so support can follow one tenant's calls.
    "tenantId": F.context_authorizer("tenant_id"),
    "keyId": F.context_authorizer_principal_id(),
    "authorizerStatus": F.context_authorizer_status(),
    "authorizerError": F.context_authorizer_error(),
    "errorType": F.context_error_response_type(),
    "errorMessage": F.context_error_message(),
    "apiKeyId": F.context_identity_api_key_id(),
    "xrayTraceId": F.context_xray_trace_id(),
}


class ApiStack(cdk.Stack):
    """Owns the REST API, its stage, usage plan, gateway responses, authorizer and API Lambda."""

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
        relay_function: lambda_.IFunction,
        webhook_state_machine: sfn.IStateMachine,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, env=config.environment, **kwargs)
        code = function_code()
        layer = DependenciesLayer(self, "Dependencies", layer_dir=config.layer_dir).layer
        # Where the cluster pauses, its waits are long enough for its resume, still under the 25 s below.
        database_environment = lambda_database_environment(
            config, database_secret.secret_arn, database_endpoint
        )

        self.api_handler = EntrypointFunction(
            self,
            "ApiHandler",
            config=config,
            entrypoint="api",
            description="Tollgate extraction-jobs API",
            code=code,
            layer=layer,
            vpc=vpc,
            security_groups=[database_clients],
            environment={
                **database_environment,
                "DOCUMENTS_BUCKET": documents_bucket.bucket_name,
                "RELAY_FUNCTION_NAME": relay_function.function_name,
                # Replays start a new execution of the delivery on DeliveryStack's dispatcher.
                "WEBHOOK_STATE_MACHINE_ARN": webhook_state_machine.state_machine_arn,
                **settings_environment(config.admission),
                **settings_environment(config.jobs),
                **settings_environment(config.pricing),
            },
            # Under API Gateway's 29-second integration timeout, so the client gets our error, not a 504.
            timeout=cdk.Duration.seconds(25),
            memory_size=1024,
        )
        self.authorizer_handler = EntrypointFunction(
            self,
            "AuthorizerHandler",
            config=config,
            entrypoint="authorizer",
            description="Tollgate API-key authorizer",
            code=code,
            layer=layer,
            vpc=vpc,
            security_groups=[database_clients],
            environment={**database_environment, **settings_environment(config.authorizer)},
            # A key not in its cache is looked up in PostgreSQL, which may first have to resume.
            timeout=cdk.Duration.seconds(25 if config.auto_pause else 10),
        )
        for handler in (self.api_handler, self.authorizer_handler):
            database_secret.grant_read(handler.function)
        # The nudge invokes the unqualified name, so no version or alias (and no ARN wildcard) is granted.
        relay_function.grant_invoke_latest_version(self.api_handler.function)
        webhook_state_machine.grant_start_execution(self.api_handler.function)
        self._grant_documents(documents_bucket)

        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=config.log_retention_days,
            removal_policy=config.cdk_removal_policy,
        )
        self.api = rest_api(self, config, self.access_logs)
        self.usage_plan = self._usage_plan(config)
        ProblemGatewayResponses(self, "Problems", api=self.api)
        self._routes(config)
        self.firewall = api_firewall(self, config, self.api)
        self._acknowledge_api_findings(config)

        cdk.CfnOutput(self, "ApiUrl", value=self.api.url)
        # Tenant provisioning attaches each tenant's usage identifier key to this plan.
        cdk.CfnOutput(self, "UsagePlanId", value=self.usage_plan.usage_plan_id)

    def grant_tenant_provisioning(self, grantee: iam.IGrantable) -> iam.Grant:
        """What `tollgate tenants create|sync-usage-keys` need to put tenants' keys on this stage's plan."""
        return grant_usage_keys(grantee, self.usage_plan)

    def _grant_documents(self, documents_bucket: ExportedDocumentsBucket) -> None:
        """Read and put (never delete) tenants' documents, with the bucket key's encrypt/decrypt."""
        # Imported from DataStack's exports, so CloudFormation tracks this stack's use of the bucket; cdk-nag
        # renders the imported ARN with the export's fixed name, which keeps the acknowledgements precise.
        documents = documents_bucket.imported(self, "DocumentsBucket")
        function = self.api_handler.function
        documents.grant_read(function)
        documents.grant_put(function)

        role = function.role
        assert role is not None
        objects = f"{documents_bucket.nag_bucket_arn}/*"
        same_bucket = "and the statement names only this stage's documents bucket."
        wildcard_reasons = {
            f"Resource::{objects}": (
                "Objects are keyed per tenant and per document, so the function needs every key of this one "
                "bucket; tenant isolation is enforced by the application and PostgreSQL row-level security."
            ),
            "Action::s3:GetObject*": f"From grant_read: GetObject and its version variants, {same_bucket}",
            "Action::s3:GetBucket*": f"From grant_read: bucket metadata such as versioning, {same_bucket}",
            "Action::s3:List*": f"From grant_read: a missing key answers 404 instead of 403, {same_bucket}",
            "Action::s3:Abort*": f"From grant_put: aborting its own multipart uploads, {same_bucket}",
            "Action::kms:GenerateDataKey*": (
                "From grant_put: data keys to encrypt new objects, from the documents bucket's own key only."
            ),
            "Action::kms:ReEncrypt*": (
                "From CDK's KMS encrypt/decrypt grant on the documents bucket's own key; no other key named."
            ),
        }
        for finding, reason in wildcard_reasons.items():
            acknowledge(role, f"AwsSolutions-IAM5[{finding}]", reason)

    def _acknowledge_api_findings(self, config: StageConfig) -> None:
        acknowledgements: dict[str, str] = {
            "AwsSolutions-COG4": (
                "Tenants are machines, not users: they authenticate with API keys checked by the Lambda "
                "TOKEN authorizer against hashed keys in PostgreSQL, so there is no Cognito user pool."
            ),
            "AwsSolutions-APIG2": (
                "Requests are validated by the API Lambda (pydantic models, size limits), which answers "
                "every rejection with the documented problem+json type; gateway-level validation would "
                "answer the same mistakes with a different, undocumented body."
            ),
        }
        if not config.waf_enabled:
            per_tenant = (
                ", and each tenant is throttled and capped by its usage-plan key"
                if config.enforce_usage_plan
                else ""
            )
            acknowledgements["AwsSolutions-APIG3"] = (
                "This stage runs without a WAF web ACL (waf_enabled false in cdk.json, to save its cost "
                "where no tenant's traffic arrives): keys are checked by the authorizer and the stage "
                f"throttles{per_tenant}. Stages that face tenants set waf_enabled, which adds the web ACL "
                "with a rate limit per source address."
            )
        for rule, reason in acknowledgements.items():
            acknowledge(self.api, rule, reason)

    def _usage_plan(self, config: StageConfig) -> apigw.UsagePlan:
        plan = self.api.add_usage_plan(
            "TenantPlan",
            name=f"tollgate-{config.stage}-tenants",
            description="Default per-tenant limits; each tenant's key is attached when the tenant is created",
            throttle=apigw.ThrottleSettings(
                rate_limit=config.usage_plan_rate, burst_limit=config.usage_plan_burst
            ),
            quota=apigw.QuotaSettings(limit=config.usage_plan_daily_quota, period=apigw.Period.DAY),
        )
        plan.add_api_stage(stage=self.api.deployment_stage)
        return plan

    def _routes(self, config: StageConfig) -> None:
        authorizer = apigw.TokenAuthorizer(
            self,
            "ApiKeyAuthorizer",
            handler=self.authorizer_handler.function,
            identity_source=apigw.IdentitySource.header("Authorization"),
            validation_regex=AUTHORIZATION_PATTERN,
            results_cache_ttl=cdk.Duration.seconds(config.authorizer_cache_ttl_seconds),
        )
        # One integration for every route; the Lambda routes by method and path itself. Test invocations
        # from the console are not needed, which halves the invoke permissions.
        integration = apigw.LambdaIntegration(self.api_handler.function, allow_test_invoke=False)
        protected: dict[str, Any] = {
            "authorizer": authorizer,
            "authorization_type": apigw.AuthorizationType.CUSTOM,
            "api_key_required": config.enforce_usage_plan,
        }

        # One method per operation of the app's own route table: what the Lambda serves is what the stage
        # routes to it, and a public route says why (tollgate.api.surface).
        for operation in http_surface():
            resource = self.api.root.resource_for_path(operation.path)
            if operation.public is None:
                resource.add_method(operation.method, integration, **protected)
                continue
            method = resource.add_method(
                operation.method,
                integration,
                authorization_type=apigw.AuthorizationType.NONE,
                api_key_required=False,
            )
            acknowledge(method, "AwsSolutions-APIG4", operation.public)


def rest_api(scope: Construct, config: StageConfig, access_logs: logs.ILogGroup) -> apigw.RestApi:
    """The REST API and its stage: access logs, execution logs of errors, X-Ray, stage throttling.

    Both kinds of log need the account's API Gateway CloudWatch role; with ``api_gateway_cloudwatch_role`` the
    API creates it and sets it on the account (retained on delete, since other stages of the account and
    region log through the same setting), and the stage waits for that setting, so a first deploy in a fresh
    account does not fail on it.
    """
    owns_role = config.api_gateway_cloudwatch_role
    api = apigw.RestApi(
        scope,
        "Api",
        rest_api_name=f"tollgate-{config.stage}",
        description="Tollgate: asynchronous, rate-limited LLM extraction jobs",
        endpoint_types=[apigw.EndpointType.REGIONAL],
        # The authorizer names the tenant's usage-plan key (usageIdentifierKey), so tenants send one
        # credential, not two; it takes effect where a method requires a key (enforce_usage_plan).
        api_key_source_type=apigw.ApiKeySourceType.AUTHORIZER,
        cloud_watch_role=owns_role,
        cloud_watch_role_removal_policy=cdk.RemovalPolicy.RETAIN if owns_role else None,
        deploy_options=apigw.StageOptions(
            stage_name=STAGE_NAME,
            access_log_destination=apigw.LogGroupLogDestination(access_logs),
            access_log_format=apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS)),
            # Errors only, and never request or response bodies: those carry tenants' documents and results.
            logging_level=apigw.MethodLoggingLevel.ERROR,
            data_trace_enabled=False,
            tracing_enabled=True,
            metrics_enabled=True,
            throttling_rate_limit=config.api_throttle_rate,
            throttling_burst_limit=config.api_throttle_burst,
        ),
    )
    # API Gateway would create the execution log group itself on the first error, kept forever; created
    # here first, it has the stage's retention.
    execution_logs = logs.LogGroup(
        scope,
        "ExecutionLogs",
        log_group_name=f"API-Gateway-Execution-Logs_{api.rest_api_id}/{STAGE_NAME}",
        retention=config.log_retention_days,
        removal_policy=config.cdk_removal_policy,
    )
    api.deployment_stage.node.add_dependency(execution_logs)
    if owns_role:
        role = api.node.find_child("CloudWatchRole")
        acknowledge(
            role,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonAPIGatewayPushToCloudWatchLogs]",
            "The service role API Gateway documents for its account logging setting; AWS maintains the "
            "policy as the service's logging needs change, and only apigateway.amazonaws.com can assume it.",
        )
    return api


def api_firewall(scope: Construct, config: StageConfig, api: apigw.RestApi) -> ApiFirewall | None:
    """The stage's web ACL when ``waf_enabled``; None otherwise."""
    if not config.waf_enabled:
        return None
    return ApiFirewall(
        scope,
        "Firewall",
        stage=api.deployment_stage,
        name=f"tollgate-{config.stage}-api",
        rate_limit=config.waf_rate_limit,
        window_seconds=WAF_RATE_WINDOW_SECONDS,
    )


def grant_usage_keys(grantee: iam.IGrantable, usage_plan: apigw.IUsagePlan) -> iam.Grant:
    """Find and make API keys (GET, POST /apikeys) and add them to ``usage_plan`` (POST on its /keys) only.

    API keys have no ARN of their own before they exist, and none of these calls names another plan.
    """
    scope = usage_plan

    def arn(path: str) -> str:
        return cdk.Arn.format(
            cdk.ArnComponents(
                service="apigateway", account="", resource=path, arn_format=cdk.ArnFormat.NO_RESOURCE_NAME
            ),
            cdk.Stack.of(scope),
        )

    api_keys = iam.Grant.add_to_principal(
        grantee=grantee, actions=["apigateway:GET", "apigateway:POST"], resource_arns=[arn("/apikeys")]
    )
    plan_keys = iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["apigateway:POST"],
        resource_arns=[arn(f"/usageplans/{usage_plan.usage_plan_id}/keys")],
    )
    return api_keys.combine(plan_keys)
