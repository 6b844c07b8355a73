"""Tenants' OCR documents: canonical bytes, content digest, and the object store that keeps them.

A document's identity is the SHA-256 of its canonical form, whether it arrived inline or as a reference
to an object version: a filename or a URL says nothing about the content.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Protocol
from uuid import UUID

from pydantic import Field, StringConstraints

from tollgate.core.errors import DocumentUnavailable, PayloadTooLarge
from tollgate.core.models import Strict

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

DOCUMENT_FORMAT = "ocr-pages/v1"
PageText = Annotated[str, StringConstraints(min_length=1, max_length=200_000)]


class OcrPage(Strict):
    text: PageText = Field(description="The OCR text of one page.")


class InlineDocument(Strict):
    """OCR text sent with the request; stored by content digest."""

    pages: list[OcrPage] = Field(min_length=1, max_length=200)


class DocumentReference(Strict):
    """An object version the tenant already stored under its own prefix (UTF-8 text, pages split by \\f)."""

    s3_key: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    version_id: Annotated[str, StringConstraints(min_length=1, max_length=1024)]


PAGE_SEPARATOR = "\f"


@dataclass(frozen=True)
class CanonicalDocument:
    pages: tuple[str, ...]
    body: bytes
    sha256: str

    @property
    def size_bytes(self) -> int:
        return len(self.body)

    @property
    def char_count(self) -> int:
        return sum(len(p) for p in self.pages)


def canonicalize(pages: list[str] | tuple[str, ...]) -> CanonicalDocument:
    body = json.dumps(
        {"format": DOCUMENT_FORMAT, "pages": list(pages)}, ensure_ascii=False, separators=(",", ":")
    ).encode("utf-8")
    return CanonicalDocument(tuple(pages), body, hashlib.sha256(body).hexdigest())


def tenant_prefix(tenant_id: UUID) -> str:
    return f"tenants/{tenant_id}/"


def document_key(tenant_id: UUID, sha256: str) -> str:
    return f"{tenant_prefix(tenant_id)}documents/{sha256}.json"


class DocumentStoreUnreachable(Exception):
    """The store did not answer (connection refused or timed out, or a 5xx): the object may well be there,
    so the attempt is retried later rather than the job ended."""


class DocumentStore(Protocol):
    def put(self, key: str, body: bytes) -> str:
        """Stores the bytes; returns the object version id."""

    def get(self, key: str, version_id: str, max_bytes: int) -> bytes:
        """The bytes of one object version; DocumentUnavailable or PayloadTooLarge otherwise."""


class S3DocumentStore:
    def __init__(self, client: S3Client, bucket: str) -> None:
        self._s3 = client
        self._bucket = bucket

    def put(self, key: str, body: bytes) -> str:
        response = self._s3.put_object(
            Bucket=self._bucket,
            Key=key,
            Body=body,
            ContentType="application/json",
            ChecksumAlgorithm="SHA256",
        )
        version = response.get("VersionId")
        if not version or version == "null":
            raise RuntimeError(f"bucket {self._bucket} is not versioned; documents need object versions")
        return version

    def get(self, key: str, version_id: str, max_bytes: int) -> bytes:
        from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

        try:
            response = self._s3.get_object(Bucket=self._bucket, Key=key, VersionId=version_id)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in {"NoSuchKey", "NoSuchVersion", "InvalidArgument", "404", "400"}:
                raise DocumentUnavailable(f"no object version {version_id!r} at {key!r}") from None
            if error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500:
                raise DocumentStoreUnreachable(f"S3 answered {code or 'a server error'}") from error
            raise
        except (ConnectionError, HTTPClientError) as error:
            raise DocumentStoreUnreachable(f"S3 did not answer: {type(error).__name__}") from error
        if response["ContentLength"] > max_bytes:
            response["Body"].close()
            raise PayloadTooLarge(
                f"the object is {response['ContentLength']} bytes; the limit is {max_bytes}"
            )
        return response["Body"].read()


def document_from_inline(document: InlineDocument, max_bytes: int) -> CanonicalDocument:
    canonical = canonicalize([page.text for page in document.pages])
    if canonical.size_bytes > max_bytes:
        raise PayloadTooLarge(f"the document is {canonical.size_bytes} bytes; the limit is {max_bytes}")
    return canonical


def document_from_reference(
    reference: DocumentReference, tenant_id: UUID, store: DocumentStore, max_bytes: int
) -> CanonicalDocument:
    if not reference.s3_key.startswith(tenant_prefix(tenant_id)) or ".." in reference.s3_key:
        raise DocumentUnavailable(f"document references must be under {tenant_prefix(tenant_id)}")
    raw = store.get(reference.s3_key, reference.version_id, max_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DocumentUnavailable("the referenced object is not UTF-8 text") from None
    pages = [page for page in text.split(PAGE_SEPARATOR) if page.strip()]
    if not pages:
        raise DocumentUnavailable("the referenced object holds no text")
    return canonicalize(pages)


def pages_from_canonical(body: bytes) -> tuple[str, ...]:
    """The pages of a stored document (the canonical JSON written at acceptance)."""
    data = json.loads(body)
    if data.get("format") != DOCUMENT_FORMAT:
        raise DocumentUnavailable(f"stored document has format {data.get('format')!r}")
    return tuple(data["pages"])
