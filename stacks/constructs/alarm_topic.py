"""An encrypted SNS topic that CloudWatch alarms can publish to, optionally with an email subscription.

CloudWatch cannot use the AWS-managed SNS key, so the topic gets its own key whose policy admits CloudWatch
from this account only; the topic itself refuses publishers that do not use TLS.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from stacks.config import StageConfig

CLOUDWATCH = "cloudwatch.amazonaws.com"


class AlarmTopic(Construct):
    """``topic`` receives every alarm passed to ``notify``, on entering ALARM and on recovering."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        # Only alarms of this account and region may use the key or publish: a confused-deputy guard.
        from_own_alarms = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {
                "aws:SourceArn": f"arn:{stack.partition}:cloudwatch:{stack.region}:{stack.account}:alarm:*"
            },
        }

        self.key = kms.Key(
            self,
            "Key",
            description=f"Encrypts Tollgate {config.stage} alarm notifications",
            enable_key_rotation=True,
            removal_policy=config.cdk_removal_policy,
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsEncryptNotifications",
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions=from_own_alarms,
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name=f"Tollgate {config.stage} alarms",
            master_key=self.key,
            enforce_ssl=True,
        )
        # enforce_ssl adds a topic policy, which replaces SNS's default one; CloudWatch needs a grant in it.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal(CLOUDWATCH)],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=from_own_alarms,
            )
        )
        if config.alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(config.alarm_email))

    def notify(self, *alarms: cloudwatch.Alarm) -> None:
        action = cloudwatch_actions.SnsAction(self.topic)
        for alarm in alarms:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
