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
from tollgate.scheduler.retention import ARCHIVE_PREFIX


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


# Where acceptance stores the canonical copy of each document (tollgate.core.documents.document_key): the only
# objects retention deletes. Tenants' own objects elsewhere under tenants/<id>/ are never touched.
CANONICAL_DOCUMENTS = "tenants/*/documents/*"


class DocumentsRetentionAccess(Construct):
    """Lets the scheduler's ``role`` write results archives (``archive/results/``) and delete canonical
    document versions no job uses any more; it reads nothing."""

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
        self.bucket.grant_put(role, f"{ARCHIVE_PREFIX}*")
        self.bucket.grant_delete(role, CANONICAL_DOCUMENTS)

        bucket_arn = nag_documents_objects_arn(config).removesuffix("/*")
        same_key = "on the documents bucket's own key only."
        reasons = {
            f"Resource::{bucket_arn}/{ARCHIVE_PREFIX}*": (
                "Archives are named per tenant, day and batch, so the scheduler writes any key under this "
                "one prefix of this one bucket; it cannot write documents."
            ),
            f"Resource::{bucket_arn}/{CANONICAL_DOCUMENTS}": (
                "Retention deletes the canonical copy of a document once no job uses it, whatever its "
                "tenant; the version deleted is the one its database row named, and tenants' own objects "
                "are outside this pattern."
            ),
            "Action::s3:Abort*": (
                "From grant_put: aborting its own multipart uploads, and only under the archive prefix of "
                "this bucket."
            ),
            "Action::s3:DeleteObject*": (
                "From grant_delete: DeleteObject and DeleteObjectVersion, limited to the canonical document "
                "copies of this one bucket."
            ),
            "Action::kms:GenerateDataKey*": f"From grant_put: data keys to encrypt new archives, {same_key}",
            "Action::kms:ReEncrypt*": f"From CDK's KMS grant for encrypted puts, {same_key}",
        }
        for finding, reason in reasons.items():
            acknowledge(role, f"AwsSolutions-IAM5[{finding}]", reason)
