"""The stage's documents bucket as other stacks see it: DataStack's exports of its name and its key, and the
read and retention access built on them.

Consumers import the exports (``Fn::ImportValue``), so CloudFormation knows who uses the bucket: it refuses
to change or remove an export while a stack imports it, instead of leaving that stack pointing at a bucket
that is gone. The exports have names chosen here, not derived from a hash, so an imported ARN renders the
same way in every synth and cdk-nag's findings about it carry precise acknowledgements.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.constructs.nag import acknowledge
from tollgate.scheduler.retention import ARCHIVE_PREFIX


@dataclass(frozen=True)
class ExportedDocumentsBucket:
    """The export names of the documents bucket's name and of its KMS key's ARN, and their stack."""

    producer: cdk.Stack
    name_export: str
    key_arn_export: str

    @classmethod
    def export(cls, bucket: s3.IBucket, key: kms.IKey) -> ExportedDocumentsBucket:
        """Export ``bucket``'s name and ``key``'s ARN from the bucket's own stack."""
        producer = cdk.Stack.of(bucket)
        exported = cls(
            producer=producer,
            name_export=f"{producer.stack_name}:DocumentsBucketName",
            key_arn_export=f"{producer.stack_name}:DocumentsKeyArn",
        )
        cdk.CfnOutput(
            producer, "DocumentsBucketName", value=bucket.bucket_name, export_name=exported.name_export
        )
        cdk.CfnOutput(producer, "DocumentsKeyArn", value=key.key_arn, export_name=exported.key_arn_export)
        return exported

    @property
    def bucket_name(self) -> str:
        """The bucket's name, imported: what a consumer's DOCUMENTS_BUCKET variable holds."""
        return cdk.Fn.import_value(self.name_export)

    def imported(self, scope: Construct, construct_id: str) -> s3.IBucket:
        """The bucket, with its key, for ``scope``'s stack to grant on; that stack now deploys after the
        producer's."""
        consumer = cdk.Stack.of(scope)
        if consumer is self.producer:
            raise ValueError("the documents bucket's own stack uses the bucket itself, not its exports")
        consumer.add_stack_dependency(self.producer, "imports the documents bucket's name and key")
        key = kms.Key.from_key_arn(scope, f"{construct_id}Key", cdk.Fn.import_value(self.key_arn_export))
        return s3.Bucket.from_bucket_attributes(
            scope, construct_id, bucket_name=self.bucket_name, encryption_key=key
        )

    @property
    def nag_bucket_arn(self) -> str:
        """The imported bucket's ARN as cdk-nag renders it: pseudo parameters as ``<AWS::...>``, an import as
        its export's name."""
        return f"arn:<AWS::Partition>:s3:::{self.name_export}"


class DocumentsReadAccess(Construct):
    """Lets ``role`` read (never write or delete) tenants' documents, decrypting with the bucket's key."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        documents_bucket: ExportedDocumentsBucket,
        role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        self.bucket = documents_bucket.imported(self, "Bucket")
        self.bucket.grant_read(role)

        same_bucket = "and the statement names only this stage's documents bucket."
        reasons = {
            f"Resource::{documents_bucket.nag_bucket_arn}/*": (
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
        documents_bucket: ExportedDocumentsBucket,
        role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        self.bucket = documents_bucket.imported(self, "Bucket")
        self.bucket.grant_put(role, f"{ARCHIVE_PREFIX}*")
        self.bucket.grant_delete(role, CANONICAL_DOCUMENTS)

        bucket_arn = documents_bucket.nag_bucket_arn
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
