"""Assembles the local system in one process: PostgreSQL, moto, migrations, the authorizer and the API."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from tollgate.api.app import create_app, handle
from tollgate.authorizer import authorize_request
from tollgate.db import Database, build_database
from tollgate.db.migrations import apply_migrations
from tollgate.local.aws import LocalAws, create_documents_bucket
from tollgate.local.gateway import LocalGateway
from tollgate.local.postgres import server_url
from tollgate.settings import REPO_ROOT, ApiSettings, AuthorizerSettings, DatabaseSettings
from tollgate.wiring import build_api, build_authorizer

DEFAULT_DATA_DIR = Path(".tollgate")
LOCAL_BUCKET = "tollgate-documents-local"


@dataclass
class LocalStack:
    port: int = 8080
    data_dir: Path = DEFAULT_DATA_DIR
    api_overrides: dict[str, Any] = field(default_factory=dict)
    database_url: str = ""
    aws: LocalAws | None = None
    gateway: LocalGateway | None = None
    system_db: Database | None = None
    _closers: list[Any] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        assert self.gateway is not None
        return self.gateway.url

    def start(self) -> LocalStack:
        if not self.database_url:
            self.database_url, pg_handle = server_url(self.data_dir.resolve() / "pgdata")
            if pg_handle is not None:
                self._closers.append(pg_handle.cleanup)
        if self.aws is None:
            self.aws = LocalAws()
            self.aws.start()
            self._closers.append(self.aws.stop)
        create_documents_bucket(LOCAL_BUCKET)
        apply_migrations(self.database_url, REPO_ROOT / "migrations")

        url = SecretStr(self.database_url)
        api_settings = ApiSettings(database_url=url, documents_bucket=LOCAL_BUCKET, **self.api_overrides)
        deps = build_api(api_settings)
        self._closers.append(deps.acceptance.db.close)
        app = create_app(deps)
        authorizer_settings = AuthorizerSettings(database_url=url)
        authorizer_db = build_database(authorizer_settings, pool_name="authorizer")
        self._closers.append(authorizer_db.close)
        resolver = build_authorizer(authorizer_settings, authorizer_db)
        self.system_db = build_database(
            DatabaseSettings(database_url=url, database_role="tollgate_system"), pool_name="system"
        )
        self._closers.append(self.system_db.close)

        self.gateway = LocalGateway(
            api=lambda event, context: handle(app, deps, event, context),
            authorizer=lambda token, arn: authorize_request(resolver, token, arn),
            port=self.port,
        )
        self.gateway.start()
        self._closers.append(self.gateway.stop)
        return self

    def stop(self) -> None:
        while self._closers:
            self._closers.pop()()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
