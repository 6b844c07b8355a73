-- documents: a tenant's stored documents, deduplicated by content digest; jobs point at them.

-- name: find_document_by_digest
SELECT document_id, s3_key, s3_version_id, size_bytes, page_count
FROM documents WHERE tenant_id = %(tenant_id)s AND content_sha256 = %(sha256)s

-- name: insert_document
-- A document is in its row (body) or in the documents bucket (s3_key, s3_version_id), never both.
INSERT INTO documents (
    document_id, tenant_id, content_sha256, s3_key, s3_version_id, body, size_bytes, page_count)
VALUES (%(document_id)s, %(tenant_id)s, %(sha256)s, %(s3_key)s, %(s3_version_id)s, %(body)s, %(size_bytes)s,
        %(page_count)s)

-- name: get_document_for_job
SELECT d.s3_key, d.s3_version_id, d.body, d.page_count FROM documents d WHERE d.document_id = %(document_id)s
