"""A WAFv2 web ACL in front of a REST API stage: a rate limit per source address, then AWS's common rules.

The rate rule runs first, so a flood (of wrong keys, say) from one address is answered by the edge with 429
and never reaches the authorizer or its database.
"""

from __future__ import annotations

import json

from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from tollgate.api.problems import PROBLEM_TYPE_BASE

RATE_RULE = "RateLimitPerSourceAddress"
COMMON_RULES = "AWSManagedRulesCommonRuleSet"
# The common rule set blocks bodies over 8 KB; inline documents are far larger. The API Lambda enforces the
# stage's own document limit (MAX_DOCUMENT_BYTES, answered 413), and WAF cannot see past its inspection
# limit anyway, so this rule only counts.
BODY_SIZE_RULE = "SizeRestrictions_BODY"
RATE_LIMITED_BODY = "rate-limited"
# How long a blocked address should wait: a rate rule lifts once the address's count over the window
# falls under the limit, which WAF re-evaluates about every minute.
RATE_LIMITED_RETRY_AFTER_SECONDS = 60


def _visibility(metric_name: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
    return wafv2.CfnWebACL.VisibilityConfigProperty(
        cloud_watch_metrics_enabled=True, metric_name=metric_name, sampled_requests_enabled=True
    )


class ApiFirewall(Construct):
    """A REGIONAL web ACL associated with ``stage``; ``rate_limit`` requests per address per ``window``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stage: apigw.Stage,
        name: str,
        rate_limit: int,
        window_seconds: int,
    ) -> None:
        super().__init__(scope, construct_id)
        # The same family of problem+json bodies the gateway and the API Lambda answer with. WAF sends it as
        # application/json: its custom responses offer no other JSON media type.
        rate_limited = {
            "type": f"{PROBLEM_TYPE_BASE}throttled",
            "title": "Too Many Requests",
            "status": 429,
            "detail": "Too many requests from this address; retry after the Retry-After interval.",
        }
        self.web_acl = wafv2.CfnWebACL(
            self,
            "WebAcl",
            name=name,
            description="Rate limit per source address, then the AWS common rule set, before the REST API",
            scope="REGIONAL",
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            visibility_config=_visibility(name),
            custom_response_bodies={
                RATE_LIMITED_BODY: wafv2.CfnWebACL.CustomResponseBodyProperty(
                    content_type="APPLICATION_JSON", content=json.dumps(rate_limited)
                )
            },
            rules=[
                wafv2.CfnWebACL.RuleProperty(
                    name=RATE_RULE,
                    priority=0,
                    statement=wafv2.CfnWebACL.StatementProperty(
                        rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(
                            limit=rate_limit,
                            aggregate_key_type="IP",
                            evaluation_window_sec=window_seconds,
                        )
                    ),
                    action=wafv2.CfnWebACL.RuleActionProperty(
                        block=wafv2.CfnWebACL.BlockActionProperty(
                            custom_response=wafv2.CfnWebACL.CustomResponseProperty(
                                response_code=429,
                                custom_response_body_key=RATE_LIMITED_BODY,
                                response_headers=[
                                    wafv2.CfnWebACL.CustomHTTPHeaderProperty(
                                        name="Retry-After", value=str(RATE_LIMITED_RETRY_AFTER_SECONDS)
                                    )
                                ],
                            )
                        )
                    ),
                    visibility_config=_visibility(f"{name}-{RATE_RULE}"),
                ),
                wafv2.CfnWebACL.RuleProperty(
                    name=COMMON_RULES,
                    priority=1,
                    statement=wafv2.CfnWebACL.StatementProperty(
                        managed_rule_group_statement=wafv2.CfnWebACL.ManagedRuleGroupStatementProperty(
                            vendor_name="AWS",
                            name=COMMON_RULES,
                            rule_action_overrides=[
                                wafv2.CfnWebACL.RuleActionOverrideProperty(
                                    name=BODY_SIZE_RULE,
                                    action_to_use=wafv2.CfnWebACL.RuleActionProperty(count={}),
                                )
                            ],
                        )
                    ),
                    override_action=wafv2.CfnWebACL.OverrideActionProperty(none={}),
                    visibility_config=_visibility(f"{name}-{COMMON_RULES}"),
                ),
            ],
        )
        self.association = wafv2.CfnWebACLAssociation(
            self, "Association", resource_arn=stage.stage_arn, web_acl_arn=self.web_acl.attr_arn
        )
        # The stage must exist before WAF can attach to it; its ARN alone is only a string.
        self.association.node.add_dependency(stage)
