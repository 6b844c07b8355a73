"""`tollgate local env` gives a shell the running system's addresses, read from what `local up` wrote, so the
README's commands name no port."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

from tollgate.support.configuration import DISCOVERY_FILE


def local_env(data_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tollgate.cli.main", "local", "env", "--data-dir", str(data_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_it_prints_the_addresses_local_up_wrote_as_variables_a_shell_can_eval(tmp_path: Path) -> None:
    facts = {
        "api_url": "http://127.0.0.1:41234",
        "erp_url": "http://127.0.0.1:41235",
        "websocket_url": "ws://127.0.0.1:41237",
        "database_url": "postgresql://postgres:secret@127.0.0.1:5432/x",
    }
    (tmp_path / DISCOVERY_FILE).write_text(json.dumps(facts), encoding="utf-8")

    result = local_env(tmp_path)

    assert result.returncode == 0, result.stderr
    shown = 'echo "$TOLLGATE_API_URL $TOLLGATE_ERP_URL $TOLLGATE_FEED_URL"'
    shell = subprocess.run(
        ["bash", "-c", f"eval {shlex.quote(result.stdout)}; {shown}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.split() == [
        "http://127.0.0.1:41234",
        "http://127.0.0.1:41235",
        "ws://127.0.0.1:41237",
    ]
    assert "secret" not in result.stdout


def test_without_a_running_system_it_says_how_to_start_one(tmp_path: Path) -> None:
    result = local_env(tmp_path)

    assert result.returncode == 1
    assert "`tollgate local up` starts it" in result.stderr
    assert result.stdout == ""
