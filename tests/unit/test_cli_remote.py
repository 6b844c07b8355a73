"""Stage mode finds its region as an operator's shell names it: AWS_REGION (what the banner of `local up`
and the AWS CLI say), else AWS_DEFAULT_REGION, else the profile's; a function URL's own region wins. botocore
alone reads no AWS_REGION, which made `--ops-url` with AWS_REGION fail with "no AWS region"."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from tollgate.cli import remote
from tollgate.cli.remote import Target, client_for

LOCAL_URL = "http://127.0.0.1:8082/"
STAGE_URL = "https://abc123xyz.lambda-url.eu-central-1.on.aws/"


@pytest.fixture
def shell(monkeypatch, tmp_path):
    """An operator's shell with credentials, no profile and no region."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    return monkeypatch


@pytest.mark.parametrize(
    ("variables", "region"),
    [
        ({"AWS_REGION": "eu-west-1"}, "eu-west-1"),
        ({"AWS_DEFAULT_REGION": "us-east-2"}, "us-east-2"),
        ({"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-2"}, "eu-west-1"),
    ],
    ids=["AWS_REGION", "AWS_DEFAULT_REGION", "AWS_REGION-first"],
)
def test_an_ops_url_signs_for_the_region_the_shell_names(shell, variables, region):
    for name, value in variables.items():
        shell.setenv(name, value)

    assert client_for(Target(None, LOCAL_URL)).region == region


def test_a_function_urls_own_region_wins_over_the_shells(shell):
    shell.setenv("AWS_REGION", "eu-west-1")

    assert client_for(Target(None, STAGE_URL)).region == "eu-central-1"


def test_without_any_region_the_command_says_so(shell, capsys):
    with pytest.raises(typer.Exit) as stopped:
        client_for(Target(None, LOCAL_URL))

    assert stopped.value.exit_code == 1
    assert "no AWS region: set AWS_REGION" in capsys.readouterr().err


class _Stacks:
    def describe_stacks(self, StackName: str) -> dict[str, Any]:
        return {"Stacks": [{"Outputs": [{"OutputKey": "OpsFunctionUrl", "OutputValue": LOCAL_URL}]}]}


class _Session:
    """botocore's session as stage mode uses it, remembering the region each client was made for."""

    def __init__(self) -> None:
        import botocore.session

        self._real = botocore.session.get_session()
        self.regions: list[str | None] = []

    def create_client(self, service: str, region_name: str | None = None) -> _Stacks:
        assert service == "cloudformation"
        self.regions.append(region_name)
        return _Stacks()

    def get_credentials(self) -> Any:
        return self._real.get_credentials()

    def get_config_variable(self, name: str) -> Any:
        return self._real.get_config_variable(name)


def test_a_stages_url_is_looked_up_in_the_region_the_shell_names(shell):
    shell.setenv("AWS_REGION", "ap-southeast-2")
    session = _Session()
    shell.setattr(remote, "_session", lambda: session)

    client = client_for(Target("dev", None))

    assert session.regions == ["ap-southeast-2"]
    assert client.url == LOCAL_URL and client.region == "ap-southeast-2"
