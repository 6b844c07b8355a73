"""Per-stage deployment settings, read from CDK context (``cdk.json`` and ``-c key=value``).

One validated, frozen ``StageConfig`` is built per synth; stacks read nothing else from context.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_logs as logs
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic_settings import BaseSettings

from tollgate.settings import AdmissionSettings, ApiSettings, AuthorizerSettings

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LAYER_DIR = REPO_ROOT / "build" / "layer"

_SECTION_CONFIG = ConfigDict(frozen=True, extra="forbid")


def _settings_section(name: str, settings: type[BaseSettings], fields: Iterable[str]) -> type[BaseModel]:
    """Copy some fields of a Lambda settings model (type, default, bounds) into a plain context model.

    Copying instead of retyping keeps one source of truth for defaults and limits, and a plain model
    never reads the synth machine's own environment the way a ``BaseSettings`` would.
    """
    definitions: dict[str, Any] = {
        field: (settings.model_fields[field].annotation, settings.model_fields[field]) for field in fields
    }
    return create_model(name, __config__=_SECTION_CONFIG, **definitions)


AdmissionLimits = _settings_section("AdmissionLimits", AdmissionSettings, AdmissionSettings.model_fields)
"""Admission limits the API Lambda enforces; the fields of ``AdmissionSettings``."""

JobLimits = _settings_section(
    "JobLimits",
    ApiSettings,
    (
        "max_document_bytes",
        "default_deadline_seconds",
        "max_deadline_seconds",
        "default_max_attempts",
        "max_output_tokens",
    ),
)
"""Per-job limits and defaults the API Lambda applies at acceptance; fields of ``ApiSettings``."""

AuthorizerLimits = _settings_section("AuthorizerLimits", AuthorizerSettings, ("api_key_cache_ttl_seconds",))
"""The authorizer's own key cache; fields of ``AuthorizerSettings``."""


def settings_environment(section: BaseModel) -> dict[str, str]:
    """Render a settings section as Lambda environment variables (upper-case names, string values)."""
    return {name.upper(): str(value) for name, value in section.model_dump().items()}


class StageConfig(BaseModel):
    """Everything that differs between dev, staging and prod."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str = Field(
        pattern=r"^[a-z][a-z0-9]{1,11}$", description="Short name used in stack and resource names."
    )
    account: str | None = Field(default=None, pattern=r"^\d{12}$")
    region: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")

    vpc_cidr: str = "10.40.0.0/16"
    max_azs: int = Field(default=2, ge=2, le=3, description="An Aurora subnet group needs two AZs at least.")

    aurora_min_acu: float = Field(default=0.5, ge=0, le=256)
    aurora_max_acu: float = Field(default=4, ge=1, le=256)
    aurora_readers: int = Field(default=0, ge=0, le=2, description="Serverless v2 readers for failover.")
    backup_retention_days: int = Field(default=7, ge=1, le=35)
    iam_database_authentication: bool = True

    api_throttle_rate: float = Field(default=50, gt=0, description="Stage-wide steady requests per second.")
    api_throttle_burst: int = Field(default=100, ge=1)
    usage_plan_rate: float = Field(default=10, gt=0, description="Per-tenant steady requests per second.")
    usage_plan_burst: int = Field(default=20, ge=1)
    usage_plan_daily_quota: int = Field(default=50_000, ge=1, description="Requests per tenant per day.")
    enforce_usage_plan: bool = Field(
        default=False,
        description=(
            "Require a usage-plan key on authorized routes. Turn on only once the authorizer returns "
            "usageIdentifierKey and tenant provisioning adds each tenant's key to the plan: until then "
            "API Gateway would answer every authorized call with 403."
        ),
    )
    authorizer_cache_ttl_seconds: int = Field(
        default=300, ge=0, le=3600, description="How long API Gateway caches an authorizer decision."
    )

    log_retention: str = Field(default="ONE_MONTH", description="A member name of aws_logs.RetentionDays.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    removal_policy: Literal["retain", "destroy"] = Field(
        default="destroy", description="'retain' keeps data stores (and turns on deletion protection)."
    )

    admission: AdmissionLimits = Field(default_factory=AdmissionLimits)  # type: ignore[valid-type]
    jobs: JobLimits = Field(default_factory=JobLimits)  # type: ignore[valid-type]
    authorizer: AuthorizerLimits = Field(default_factory=AuthorizerLimits)  # type: ignore[valid-type]

    layer_dir: Path = Field(
        default=DEFAULT_LAYER_DIR, description="Folder holding python/ with the Lambda dependencies."
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _private_cidr(cls, value: str) -> str:
        network = ipaddress.ip_network(value)
        if not network.is_private or network.prefixlen > 20:
            raise ValueError("vpc_cidr must be a private range of /20 or larger")
        return value

    @field_validator("log_retention")
    @classmethod
    def _known_retention(cls, value: str) -> str:
        if value not in logs.RetentionDays.__members__ or value == "INFINITE":
            raise ValueError("log_retention must name a finite aws_logs.RetentionDays member")
        return value

    @field_validator("layer_dir")
    @classmethod
    def _anchor_layer_dir(cls, value: Path) -> Path:
        # Relative paths in cdk.json mean "from the repository", whatever the caller's working directory.
        return value if value.is_absolute() else REPO_ROOT / value

    @model_validator(mode="after")
    def _consistent(self) -> StageConfig:
        if self.aurora_min_acu > self.aurora_max_acu:
            raise ValueError("aurora_min_acu exceeds aurora_max_acu")
        if self.api_throttle_burst < self.api_throttle_rate or self.usage_plan_burst < self.usage_plan_rate:
            raise ValueError("a throttle burst must be at least its rate")
        if self.usage_plan_rate > self.api_throttle_rate:
            raise ValueError("a tenant's usage plan rate cannot exceed the stage throttle")
        if self.max_azs > 2 and (self.account is None or self.region is None):
            # An environment-agnostic stack can only address two AZs (Fn::GetAZs); say so instead of
            # silently deploying fewer than asked.
            raise ValueError("max_azs > 2 needs account and region")
        return self

    @property
    def environment(self) -> cdk.Environment | None:
        if self.account is None and self.region is None:
            return None
        return cdk.Environment(account=self.account, region=self.region)

    @property
    def retains_data(self) -> bool:
        return self.removal_policy == "retain"

    @property
    def cdk_removal_policy(self) -> cdk.RemovalPolicy:
        return cdk.RemovalPolicy.RETAIN if self.retains_data else cdk.RemovalPolicy.DESTROY

    @property
    def log_retention_days(self) -> logs.RetentionDays:
        return logs.RetentionDays[self.log_retention]

    @property
    def documents_bucket_name(self) -> str:
        """Unique per account and region; made of pseudo parameters, so it resolves inside any stack."""
        return self.documents_bucket_name_in(cdk.Aws.ACCOUNT_ID, cdk.Aws.REGION)

    def documents_bucket_name_in(self, account: str, region: str) -> str:
        return f"tollgate-{self.stage}-documents-{account}-{region}"

    def stack_name(self, concern: str) -> str:
        return f"Tollgate-{self.stage}-{concern}"

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> StageConfig:
        """Pick ``stages[stage]`` from context; top-level ``layer_dir`` (e.g. ``-c layer_dir=...``) wins."""
        stage = str(context.get("stage") or "dev")
        stages = context.get("stages") or {}
        if stage not in stages:
            known = ", ".join(sorted(stages)) or "none"
            raise ValueError(f"stage {stage!r} is not in the 'stages' context map (known: {known})")
        values: dict[str, Any] = {**stages[stage], "stage": stage}
        if context.get("layer_dir"):
            values["layer_dir"] = context["layer_dir"]
        return cls.model_validate(values)

    @classmethod
    def from_node(cls, node: Any) -> StageConfig:
        """Read the keys ``from_context`` needs from a construct node's context."""
        return cls.from_context({key: node.try_get_context(key) for key in ("stage", "stages", "layer_dir")})
