"""Stage mode of the CLI: ``tollgate --stage dev tenants create acme`` sends the command to that stage's
operations function instead of opening a database connection, which a deployed stage does not offer.

The function sits behind a Lambda function URL with AWS_IAM auth. Each request is signed with SigV4 (service
``lambda``) using the operator's own AWS credentials (the default chain), so Lambda verifies who asks and
hands the function that identity for the audit trail; nothing the CLI says about itself is trusted. The URL
comes from ``--ops-url`` / TOLLGATE_OPS_URL, or from the ``OpsFunctionUrl`` output of the stage's
``Tollgate-<stage>-Ops`` stack.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer

from tollgate.core.errors import InvalidRequest, TollgateError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from tollgate.ops.models import OpsProblem

# pydantic and the operations' models are imported when a command goes to a stage, not for every command.
R = TypeVar("R", bound="BaseModel")

OPS_STACK = "Tollgate-{stage}-Ops"
URL_OUTPUT = "OpsFunctionUrl"
SERVICE = "lambda"
# A function URL's host names its region: <url-id>.lambda-url.<region>.on.aws
_URL_REGION = re.compile(r"^[a-z0-9]+\.lambda-url\.([a-z0-9-]+)\.on\.aws$")
DEPENDENCY_UNAVAILABLE = "dependency-unavailable"
# Longer than a paced redrive of the default 100 letters, shorter than the function's own timeout.
TIMEOUT_SECONDS = 300


class RemoteRefusal(TollgateError):
    """A refusal the operations function answered with: the same detail and extensions as the use case's
    error, so each command reports it exactly as it reports the local one."""

    def __init__(self, problem: OpsProblem) -> None:
        super().__init__(problem.detail, **problem.extensions)
        self.problem = problem
        self.status = problem.status  # type: ignore[misc]
        self.problem_type = problem.type  # type: ignore[misc]


@dataclass(frozen=True)
class Target:
    """Where stage mode sends commands: a stage (its URL looked up) or a URL given outright."""

    stage: str | None
    ops_url: str | None


def _unreachable(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


# The stage this invocation of `tollgate` chose; set by the root command's callback on every invocation
# (None for local mode), so an in-process runner never carries one invocation's choice into the next.
_chosen: list[Target | None] = [None]


def choose(chosen: Target | None) -> None:
    _chosen[0] = chosen


def target() -> Target | None:
    """The stage the command line chose (``--stage`` / ``--ops-url`` on ``tollgate``), None for local mode."""
    return _chosen[0]


@dataclass
class OpsClient:
    url: str
    region: str
    credentials: Any  # botocore Credentials

    def call(self, request: BaseModel, result: type[R]) -> R:
        """Sends one command and returns its result; a refusal raises ``RemoteRefusal``; a function, network
        or AWS failure ends the command with exit code 1."""
        import urllib.error
        import urllib.request

        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from pydantic import ValidationError

        from tollgate.cli.lazy import resolve
        from tollgate.ops.models import RESULTS

        result = resolve(result)
        command = getattr(request, "command", "")
        if RESULTS.get(command) is not result:
            raise TypeError(f"{command!r} does not answer with {result.__name__}")
        body = request.model_dump_json().encode("utf-8")
        signed = AWSRequest(
            method="POST", url=self.url, data=body, headers={"content-type": "application/json"}
        )
        SigV4Auth(self.credentials, SERVICE, self.region).add_auth(signed)
        prepared = signed.prepare()
        http = urllib.request.Request(  # noqa: S310 - the scheme is checked when the URL is chosen
            prepared.url, data=body, headers=dict(prepared.headers), method="POST"
        )
        try:
            with urllib.request.urlopen(http, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
                payload = response.read()
        except urllib.error.HTTPError as error:
            self._refused(error.code, error.read())
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            _unreachable(f"cannot reach the operations function at {self.url}: {error}")
        try:
            return result.model_validate_json(payload)
        except ValidationError as error:
            _unreachable(f"the operations function answered something this CLI does not understand: {error}")

    def _refused(self, status: int, payload: bytes) -> NoReturn:
        from pydantic import ValidationError

        from tollgate.ops.models import OpsProblem

        try:
            problem = OpsProblem.model_validate_json(payload)
        except ValidationError:
            # Not the function's answer: Lambda's own (403 for a signature or a permission it refused).
            text = payload.decode("utf-8", "replace")[:500]
            hint = (
                ": does your IAM identity have lambda:InvokeFunctionUrl on the operations function?"
                if status == 403
                else ""
            )
            _unreachable(f"the operations function's URL answered HTTP {status}: {text}{hint}")
        if problem.type == DEPENDENCY_UNAVAILABLE:
            _unreachable(problem.detail)
        raise RemoteRefusal(problem)


def _session() -> Any:
    import botocore.session

    return botocore.session.get_session()


def _operator_region(session: Any) -> str | None:
    """The region the operator's shell names: AWS_REGION (as the banner and the AWS CLI say), else
    AWS_DEFAULT_REGION, else the profile's; botocore alone reads only the last two."""
    from tollgate.settings import StageModeSettings

    shell = StageModeSettings()
    region = shell.aws_region or shell.aws_default_region or session.get_config_variable("region")
    return str(region) if region else None


def _stage_url(session: Any, stage: str, region: str | None) -> str:
    """The ``OpsFunctionUrl`` output of the stage's ops stack (needs cloudformation:DescribeStacks on it)."""
    from botocore.exceptions import BotoCoreError, ClientError

    if not region:
        _unreachable(f"no AWS region: set AWS_REGION to the region stage {stage!r} is deployed in")
    name = OPS_STACK.format(stage=stage)
    try:
        cloudformation = session.create_client("cloudformation", region_name=region)
        stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
    except (BotoCoreError, ClientError) as error:
        _unreachable(f"cannot find the operations function of stage {stage!r} (stack {name}): {error}")
    for output in stacks[0].get("Outputs", []) if stacks else []:
        if output.get("OutputKey") == URL_OUTPUT:
            return str(output["OutputValue"])
    _unreachable(f"stack {name} has no {URL_OUTPUT} output: deploy the stage's Ops stack first")


def client_for(chosen: Target) -> OpsClient:
    """A signing client for the chosen stage, with the operator's credentials from the default chain. The
    region is the one the function's URL names, else the shell's (``_operator_region``)."""
    session = _session()
    shell_region = _operator_region(session)
    url = chosen.ops_url or _stage_url(session, str(chosen.stage), shell_region)
    if not url.startswith(("https://", "http://127.0.0.1", "http://localhost", "http://[::1]")):
        _unreachable(f"{url!r}: the operations function is reached over HTTPS")
    credentials = session.get_credentials()
    if credentials is None:
        _unreachable("no AWS credentials: stage mode signs each command with your IAM identity")
    host = urllib.parse.urlparse(url).hostname or ""
    match = _URL_REGION.match(host)
    region = match.group(1) if match else shell_region
    if not region:
        _unreachable("no AWS region: set AWS_REGION (the region the stage is deployed in)")
    return OpsClient(url=url if url.endswith("/") else f"{url}/", region=region, credentials=credentials)


def remote() -> OpsClient | None:
    """The stage's client when the command line chose a stage; None runs the command locally."""
    chosen = target()
    return client_for(chosen) if chosen is not None else None


C = TypeVar("C", bound="BaseModel")


def command(model: type[C], **fields: Any) -> C:
    """A command built from the CLI's options; options the function would refuse are refused here, with the
    same kind of error (exit code 2) and nothing sent."""
    from pydantic import ValidationError

    try:
        return model(**fields)
    except ValidationError as error:
        detail = "; ".join(
            f"{'.'.join(str(p) for p in item['loc'])}: {item['msg'].removeprefix('Value error, ')}"
            for item in error.errors()
        )
        raise InvalidRequest(detail) from None
