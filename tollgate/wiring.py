"""Builds each entrypoint's dependencies from its settings, once per process (cold start)."""

from __future__ import annotations

import boto3

from tollgate.acceptance.service import AcceptanceDeps
from tollgate.api.app import ApiDeps
from tollgate.auth import ApiKeyResolver
from tollgate.clock import SystemClock, new_id
from tollgate.db import Database, build_database
from tollgate.documents import S3DocumentStore
from tollgate.settings import ApiSettings, AuthorizerSettings


def build_api(settings: ApiSettings, db: Database | None = None) -> ApiDeps:
    db = db or build_database(settings, pool_name="api")
    store = S3DocumentStore(boto3.client("s3"), settings.documents_bucket)
    return ApiDeps(
        AcceptanceDeps(db=db, documents=store, settings=settings, clock=SystemClock(), new_id=new_id)
    )


def build_authorizer(settings: AuthorizerSettings, db: Database | None = None) -> ApiKeyResolver:
    db = db or build_database(settings, pool_name="authorizer")
    return ApiKeyResolver(db, SystemClock(), settings.api_key_cache_ttl_seconds)
