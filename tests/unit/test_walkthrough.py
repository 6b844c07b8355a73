"""The README walkthrough's runner finds the commands a reader would type and fails on one that does not do
what the README shows: the e2e test that runs the real walkthrough is only as good as this."""

from pathlib import Path

import pytest

from tests.walkthrough import END, START, commands, report, run, shell_environment

README = f"""# A project

```console
$ echo not part of the walkthrough
```

{START}
Some prose.

```console
$ NAME=$(echo acme)     # a variable for the next steps
$ echo "job of $NAME is \\
    SUCCEEDED"
job of acme is SUCCEEDED
```

```text
$ echo a text block is only read
```

```console
$ printf '{{"status": 409, "state": "READY"}}\\n'
{{"title": "not ready", "status": 409, "state": "READY"}}
$ printf 'HTTP/1.1 200 OK\\n'
HTTP/1.1 200 OK
ETag: "5"
$ (exit 3)   # exits 3
```
{END}
"""


def test_it_reads_the_console_commands_between_the_markers_with_their_shown_output() -> None:
    found = commands(README)

    assert [command.text for command in found] == [
        "NAME=$(echo acme)     # a variable for the next steps",
        'echo "job of $NAME is \\\n    SUCCEEDED"',
        """printf '{"status": 409, "state": "READY"}\\n'""",
        "printf 'HTTP/1.1 200 OK\\n'",
        "(exit 3)   # exits 3",
    ]
    assert [command.line for command in found] == [11, 12, 22, 24, 27]
    assert [command.exit_code for command in found] == [0, 0, 0, 0, 3]
    assert [command.facts() for command in found] == [
        [],
        ["SUCCEEDED"],
        ["READY", '"status":409'],
        ["HTTP/1.1200"],
        [],
    ]


def test_the_walkthrough_as_written_passes(tmp_path: Path) -> None:
    steps = commands(README)

    outcomes = run(steps, tmp_path, shell_environment(), timeout=60)

    assert report(steps, outcomes) == []
    assert [outcome.exit_code for outcome in outcomes] == [0, 0, 0, 0, 3]


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        # A command that fails stops the walkthrough, as it stops a reader.
        ("$ NAME=$(echo acme)", "$ NAME=$(false)"),
        # A command that answers another status than the README shows (the 412 of a stale If-Match).
        ("""$ printf '{{"status": 409""", """$ printf '{{"status": 412"""),
        # A state the README promises that never comes (a result fetched before the job finished).
        ('    SUCCEEDED"', '    READY"'),
        # A command that should end with a promised code and does not.
        ("$ (exit 3)", "$ (exit 0)"),
    ],
)
def test_a_broken_command_is_named_with_its_readme_line(tmp_path: Path, broken: str, expected: str) -> None:
    doctored = README.replace(broken.replace("{{", "{"), expected.replace("{{", "{"))
    assert doctored != README
    steps = commands(doctored)

    problems = report(steps, run(steps, tmp_path, shell_environment(), timeout=60))

    assert len(problems) == 1
    assert problems[0].startswith("README.md:")


def test_a_walkthrough_must_be_marked_once() -> None:
    with pytest.raises(ValueError, match="mark its walkthrough once"):
        commands("# nothing marked\n")
