"""Read access to the stage's documents bucket from a stack other than DataStack.

The bucket is referred to by its deterministic name, so the granted ARNs are built from local pseudo
parameters rather than from a cross-stack output whose name CDK derives from a hash: cdk-nag identifies
each wildcard finding by that rendered ARN, and only a stable rendering can carry a precise acknowledgement.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.config import StageConfig
from stacks.constructs.nag import acknowledge


def nag_documents_objects_arn(config: StageConfig) -> str:
    """The documents bucket's object ARN as cdk-nag renders it (pseudo parameters as ``<AWS::...>``)."""
    bucket_name = config.documents_bucket_name_in("<AWS::AccountId>", "<AWS::Region>")
    return f"arn:<AWS::Partition>:s3:::{bucket_name}/*"


class DocumentsReadAccess(Construct):
    """Lets ``role`` read (never write or delete) tenants' documents, decrypting with the bucket's key."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        documents_bucket: s3.IBucket,
        role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        self.bucket = s3.Bucket.from_bucket_attributes(
            self,
            "Bucket",
            bucket_name=config.documents_bucket_name,
            encryption_key=documents_bucket.encryption_key,
        )
        self.bucket.grant_read(role)

        same_bucket = "and the statement names only this stage's documents bucket."
        reasons = {
            f"Resource::{nag_documents_objects_arn(config)}": (
                "Objects are keyed per tenant and per document, and a job may name any tenant's document, "
                "so reading needs every key of this one bucket; the worker only reads the key recorded on "
                "the job it claimed from PostgreSQL."
            ),
            "Action::s3:GetObject*": f"From grant_read: GetObject and its version variants, {same_bucket}",
            "Action::s3:GetBucket*": f"From grant_read: bucket metadata such as versioning, {same_bucket}",
            "Action::s3:List*": f"From grant_read: a missing key answers 404 instead of 403, {same_bucket}",
        }
        for finding, reason in reasons.items():
            acknowledge(role, f"AwsSolutions-IAM5[{finding}]", reason)
