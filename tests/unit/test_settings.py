import pytest
from pydantic import ValidationError

from tollgate.settings import ApiSettings, DatabaseSettings


def test_a_database_source_is_required(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_SECRET_ARN", raising=False)
    with pytest.raises(ValidationError, match="DATABASE_URL or DATABASE_SECRET_ARN"):
        DatabaseSettings()


def test_api_settings_read_the_environment(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/db")
    monkeypatch.setenv("DOCUMENTS_BUCKET", "docs")
    monkeypatch.setenv("TENANT_MAX_PENDING_JOBS", "7")
    settings = ApiSettings()
    assert settings.documents_bucket == "docs"
    assert settings.tenant_max_pending_jobs == 7
    assert "postgresql://u@h/db" not in repr(settings), "the URL may carry a password: never in reprs or logs"
