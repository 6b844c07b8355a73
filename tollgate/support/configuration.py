"""Where the CLI's settings come from, the same way for every command: the environment (against AWS or a
database it names); when it does not say enough, the discovery file that a running ``tollgate local up``
writes into its data folder; when there is none and the command needs only the database, the database a
plugin offers (the development package's embedded PostgreSQL in that folder, the one `local up` uses).

Either way the result is a settings model and an AWS endpoint, handed to wiring; nothing here or downstream
reads or changes the process environment afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from tollgate.core.errors import TollgateError
from tollgate.settings import SupportDatabaseSettings

DISCOVERY_FILE = "local.json"  # written by `tollgate local up` into its data folder while it runs
# The local system's moto takes any credentials; these placeholders (the ones `local up` itself uses)
# mean real ones are never sent to it. Its queues live in this region.
LOCAL_AWS_KEY, LOCAL_AWS_SECRET, LOCAL_AWS_REGION = "testing", "testing", "eu-west-1"

S = TypeVar("S", bound=SupportDatabaseSettings)
# Where the database is when neither the environment nor a running `local up` says: a function of the data
# folder that returns a URL of a migrated database (the development package's embedded server).
DatabaseFallback = Callable[[Path], str]
# A URL that is never connected to: it only asks whether a database is all a command's settings lack.
_ANY_DATABASE = "postgresql://probe.invalid/tollgate"


class NotConfigured(TollgateError):
    problem_type = "not-configured"
    status = 503
    title = "This command needs a setting that is not there"


@dataclass(frozen=True)
class AwsEndpoint:
    """AWS somewhere other than the default credential chain: the local system's moto."""

    url: str | None
    access_key_id: str
    secret_access_key: str
    region: str


def local_aws(url: str | None) -> AwsEndpoint:
    return AwsEndpoint(url, LOCAL_AWS_KEY, LOCAL_AWS_SECRET, LOCAL_AWS_REGION)


def _missing(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        name = ".".join(str(part) for part in item["loc"]).upper()
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            problems.append(f"{name} is not set")
        else:
            problems.append(f"{name}: {message}" if name else message)
    return "; ".join(problems)


def load_support_settings(
    model: type[S], data_dir: Path, fallback: DatabaseFallback | None = None
) -> tuple[S, AwsEndpoint | None]:
    """The settings a command needs, and the AWS endpoint to use (None: the default chain).

    The environment wins when it has everything the command needs; otherwise a running ``local up``
    supplies the values (its database, queues, dispatcher and moto endpoint); otherwise, when the database is
    all that is missing, ``fallback`` says where it is. Raises ``NotConfigured`` saying what is missing."""
    try:
        return model(), None
    except ValidationError as error:
        from_environment = error
    path = data_dir.resolve() / DISCOVERY_FILE
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return _without_local_system(model, data_dir, fallback, from_environment), None
    except (OSError, ValueError) as error:
        raise NotConfigured(f"cannot read {path}: {error}") from None
    try:
        settings = model(
            database_url=facts.get("database_url"),
            job_queue_urls=facts.get("job_queue_urls"),
            job_dlq_urls=facts.get("job_dlq_urls"),
            webhook_state_machine_arn=facts.get("webhook_state_machine_arn"),
            documents_bucket=facts.get("documents_bucket"),
        )
    except ValidationError as error:
        raise NotConfigured(f"{path} does not say enough: {_missing(error)}") from None
    return settings, local_aws(facts.get("aws_endpoint_url"))


def _without_local_system(
    model: type[S], data_dir: Path, fallback: DatabaseFallback | None, from_environment: ValidationError
) -> S:
    """The fallback's database, when a database is all the environment lacks (checked before the fallback
    starts anything); otherwise what is missing."""
    if fallback is not None:
        try:
            model(database_url=_ANY_DATABASE)
        except ValidationError as error:
            raise NotConfigured(
                f"{_missing(error)}: set it in the environment, or start `tollgate local up` first"
            ) from None
        return model(database_url=fallback(data_dir))
    raise NotConfigured(
        f"{_missing(from_environment)}: set it in the environment, or start `tollgate local up` first"
    )
