"""The preflight's local checks and its reading of a stage's templates, with fake commands and files."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support import write_assembly
from tollgate_dev.preflight import (
    Finding,
    Identity,
    StageNeeds,
    Status,
    check_docker,
    check_lambda_concurrency,
    stage_needs,
)


def test_the_stage_needs_come_from_its_own_templates(tmp_path: Path) -> None:
    needs = stage_needs(write_assembly(tmp_path, reserved=(2, 1), bootstrap=21), "dev")

    assert needs.reserved_concurrency == 3
    assert needs.bootstrap_version == 21
    assert needs.bootstrap_parameter == "/cdk-bootstrap/hnb659fds/version"
    assert needs.manages_api_gateway_account is False
    assert (needs.account, needs.region) == (None, None)


def test_a_stage_that_reserves_nothing_needs_no_reserved_concurrency(tmp_path: Path) -> None:
    assert stage_needs(write_assembly(tmp_path, reserved=()), "dev").reserved_concurrency == 0


class FakeLambda:
    """A Lambda client's GetAccountSettings, with a new account's numbers unless told otherwise."""

    def __init__(self, limit: int, reserved_elsewhere: int = 0) -> None:
        self.limit = limit
        self.reserved_elsewhere = reserved_elsewhere

    def get_account_settings(self) -> dict[str, object]:
        return {
            "AccountLimit": {
                "ConcurrentExecutions": self.limit,
                "UnreservedConcurrentExecutions": self.limit - self.reserved_elsewhere,
            }
        }


class FakeSession:
    def __init__(self, lambda_client: FakeLambda) -> None:
        self.lambda_client = lambda_client
        self.asked: list[tuple[str, str]] = []

    def client(self, service: str, region_name: str) -> FakeLambda:
        self.asked.append((service, region_name))
        return self.lambda_client


IDENTITY = Identity(account="123456789012", region="eu-west-1", arn="arn:aws:iam::123456789012:user/deployer")
QUOTA_WORDS = ('"Concurrent executions"', "service code lambda", "quota code L-B99A9384")


def _needs(stage: str, reserved: int) -> StageNeeds:
    return StageNeeds(
        stage=stage,
        reserved_concurrency=reserved,
        bootstrap_version=6,
        bootstrap_parameter="/cdk-bootstrap/hnb659fds/version",
        manages_api_gateway_account=False,
    )


def test_a_stage_that_reserves_in_a_new_account_is_told_which_quota_to_raise_and_how() -> None:
    # Given a new account's quota of 10 and a stage that reserves the relay's 2 and the scheduler's 1
    session = FakeSession(FakeLambda(limit=10))

    # When the preflight checks it
    (finding,) = check_lambda_concurrency(session, IDENTITY, _needs("staging", 3))

    # Then deploying would fail, and the line names the quota, the increase to ask for and how
    line = finding.line()
    assert finding.status is Status.MISSING
    assert session.asked == [("lambda", "eu-west-1")]
    assert "is 10 in eu-west-1; stage staging reserves 3, which leaves 7 unreserved" in line
    for words in QUOTA_WORDS:
        assert words in line
    assert 'request "Concurrent executions" of at least 103' in line
    assert (
        "`aws service-quotas request-service-quota-increase --service-code lambda --quota-code L-B99A9384 "
        "--desired-value 1000 --region eu-west-1`"
    ) in line
    assert "list-requested-service-quota-change-history --service-code lambda" in line
    # and the way to deploy meanwhile
    assert "set `relay_reserved_concurrency` and `scheduler_reserved_concurrency` to 0" in line


def test_a_stage_that_reserves_nothing_deploys_under_a_new_accounts_quota_with_advice() -> None:
    (finding,) = check_lambda_concurrency(FakeSession(FakeLambda(limit=10)), IDENTITY, _needs("dev", 0))

    assert finding.status is Status.NOTE
    line = finding.line()
    assert "stage dev reserves none, so its functions share the 10 unreserved executions" in line
    for words in QUOTA_WORDS:
        assert words in line
    assert "--quota-code L-B99A9384" in line
    assert "Fix:" not in line


@pytest.mark.parametrize(("stage", "reserved"), [("dev", 0), ("prod", 3)])
def test_an_account_with_the_usual_quota_passes_either_stage(stage: str, reserved: int) -> None:
    (finding,) = check_lambda_concurrency(
        FakeSession(FakeLambda(limit=1000, reserved_elsewhere=50)), IDENTITY, _needs(stage, reserved)
    )

    assert finding.status is Status.OK
    assert 'the quota "Concurrent executions"' in finding.line()
    assert "request" not in finding.line()


@pytest.mark.parametrize(("limit", "status"), [(103, Status.OK), (102, Status.MISSING)])
def test_a_reservation_may_leave_exactly_the_hundred_lambda_keeps(limit: int, status: Status) -> None:
    (finding,) = check_lambda_concurrency(FakeSession(FakeLambda(limit)), IDENTITY, _needs("staging", 3))

    assert finding.status is status


def test_an_assembly_without_the_stage_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no stack of stage 'prod'"):
        stage_needs(write_assembly(tmp_path), "prod")


def test_a_stage_that_creates_the_api_gateway_account_role_is_recognised(tmp_path: Path) -> None:
    assert stage_needs(
        write_assembly(tmp_path, manages_api_gateway_account=True), "dev"
    ).manages_api_gateway_account


class FakeCommands:
    """Answers for the docker commands the check runs, by their first two words."""

    def __init__(self, answers: dict[str, tuple[int, str]]) -> None:
        self.answers = answers
        self.ran: list[list[str]] = []

    def __call__(self, command: Sequence[str]) -> subprocess.CompletedProcess[str] | None:
        self.ran.append(list(command))
        answer = self.answers.get(" ".join(command[:2]))
        if answer is None:
            return None
        code, output = answer
        return subprocess.CompletedProcess(
            list(command), code, stdout=output if code == 0 else "", stderr=output
        )


def _statuses(findings: list[Finding]) -> dict[str, Status]:
    return {finding.check: finding.status for finding in findings}


def _binfmt(tmp_path: Path, state: str | None) -> Path:
    path = tmp_path / "qemu-aarch64"
    if state is not None:
        path.write_text(f"{state}\ninterpreter /usr/bin/qemu-aarch64-static\n")
    return path


def test_an_x86_host_with_buildx_and_qemu_can_build_arm64(tmp_path: Path) -> None:
    commands = FakeCommands(
        {"docker info": (0, "x86_64\n"), "docker buildx": (0, "github.com/docker/buildx v0.19")}
    )

    findings = check_docker(commands, binfmt=_binfmt(tmp_path, "enabled"), which=lambda _: "/usr/bin/docker")

    assert _statuses(findings) == {
        "Docker daemon": Status.OK,
        "Docker buildx": Status.OK,
        "arm64 builds": Status.OK,
    }


def test_an_x86_host_without_a_binfmt_handler_cannot(tmp_path: Path) -> None:
    commands = FakeCommands({"docker info": (0, "x86_64\n"), "docker buildx": (0, "v0.19")})

    for state in (None, "disabled"):
        findings = check_docker(commands, binfmt=_binfmt(tmp_path, state), which=lambda _: "/usr/bin/docker")
        (arm64,) = [finding for finding in findings if finding.check == "arm64 builds"]
        assert arm64.status is Status.MISSING
        assert "tonistiigi/binfmt --install arm64" in arm64.line()


def test_an_arm64_host_builds_natively_without_qemu(tmp_path: Path) -> None:
    commands = FakeCommands({"docker info": (0, "aarch64\n"), "docker buildx": (0, "v0.19")})

    findings = check_docker(commands, binfmt=_binfmt(tmp_path, None), which=lambda _: "/usr/bin/docker")

    assert _statuses(findings)["arm64 builds"] is Status.OK


def test_a_silent_daemon_and_a_missing_buildx_are_both_reported(tmp_path: Path) -> None:
    commands = FakeCommands(
        {
            "docker info": (1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."),
            "docker buildx": (1, "docker: unknown command: docker buildx"),
        }
    )

    findings = check_docker(
        commands, binfmt=_binfmt(tmp_path, None), which=lambda _: "/usr/bin/docker", machine=lambda: "x86_64"
    )

    assert _statuses(findings) == {
        "Docker daemon": Status.MISSING,
        "Docker buildx": Status.MISSING,
        "arm64 builds": Status.MISSING,
    }
    assert "Cannot connect to the Docker daemon" in findings[0].line()
    assert all("Fix:" in finding.line() for finding in findings)


def test_no_docker_at_all_is_one_missing_line() -> None:
    commands = FakeCommands({})

    findings = check_docker(commands, which=lambda _: None)

    assert [finding.status for finding in findings] == [Status.MISSING]
    assert commands.ran == []


def test_a_line_names_status_check_and_fix() -> None:
    line = Finding(
        Status.MISSING, "AWS region", "no region configured", "`export AWS_REGION=eu-west-1`."
    ).line()

    assert line == "MISSING  AWS region: no region configured Fix: `export AWS_REGION=eu-west-1`."
