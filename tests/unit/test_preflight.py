"""The preflight's local checks and its reading of a stage's templates, with fake commands and files."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support import write_assembly
from tollgate_dev.preflight import Finding, Status, check_docker, stage_needs


def test_the_stage_needs_come_from_its_own_templates(tmp_path: Path) -> None:
    needs = stage_needs(write_assembly(tmp_path, reserved=(2, 1), bootstrap=21), "dev")

    assert needs.reserved_concurrency == 3
    assert needs.bootstrap_version == 21
    assert needs.bootstrap_parameter == "/cdk-bootstrap/hnb659fds/version"
    assert needs.manages_api_gateway_account is False
    assert (needs.account, needs.region) == (None, None)


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
