"""Runs the README's walkthrough as written: the commands of its console blocks, in order, in one shell, and
checks each against the output the README shows for it.

The walkthrough is the part of README.md between ``<!-- walkthrough:start -->`` and ``<!-- walkthrough:end -->``.
In a ```` ```console ```` block a line starting ``$ `` is a command (a trailing backslash continues it on the
next line) and the lines after it, up to the next command, are what the README says it prints. A command
passes when it exits 0 (or N, when its line ends with the comment ``# exits N``) and its output has every job
state, HTTP status and problem status that the README's output for it names: ids, times and numbers differ
from run to run; a state or a status is the point.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tollgate.core.job_states import JobState

START = "<!-- walkthrough:start -->"
END = "<!-- walkthrough:end -->"
STEP = "::walkthrough-step::"
DONE = "::walkthrough-done::"

# What a reader takes from an output: the job's state, the answer's status. Everything else may change.
_FACTS = (
    re.compile(rf"\b(?:{'|'.join(JobState)})\b"),
    re.compile(r"^HTTP/[\d.]+ \d{3}", re.MULTILINE),
    re.compile(r'"status":\s*\d{3}'),
)


@dataclass(frozen=True)
class Command:
    line: int  # where it starts in README.md, from 1
    text: str
    shown: str  # what the README shows it printing

    @property
    def exit_code(self) -> int:
        """The exit code the README promises: 0, or the N of a closing ``# exits N`` comment."""
        promised = re.search(r"#\s*exits (\d+)\s*$", self.text)
        return int(promised.group(1)) if promised else 0

    def facts(self) -> list[str]:
        """The states and statuses the README's output for this command names, in order, once each."""
        found: list[str] = []
        for pattern in _FACTS:
            for match in pattern.finditer(self.shown):
                fact = re.sub(r"\s+", "", match.group())
                if fact not in found:
                    found.append(fact)
        return found


@dataclass(frozen=True)
class Outcome:
    command: Command
    exit_code: int | None  # None: the shell never reached it, or never finished it
    output: str

    def problem(self) -> str | None:
        """Why this step does not do what the README says, or None."""
        if self.exit_code is None:
            return "did not finish"
        if self.exit_code != self.command.exit_code:
            return f"exited {self.exit_code}" + (
                f", not {self.command.exit_code} as the README says" if self.command.exit_code else ""
            )
        printed = re.sub(r"\s+", "", self.output)
        missing = [fact for fact in self.command.facts() if fact not in printed]
        return f"the README shows {', '.join(missing)}; it printed none of that" if missing else None


def commands(readme: str) -> list[Command]:
    """The walkthrough's commands in reading order."""
    if readme.count(START) != 1 or readme.count(END) != 1:
        raise ValueError(f"README.md must mark its walkthrough once with {START} and {END}")
    offset = readme[: readme.index(START)].count("\n")
    section = readme.split(START, 1)[1].split(END, 1)[0]
    found: list[Command] = []
    in_console = False
    current: list[str] = []
    shown: list[str] = []
    start = 0

    def close() -> None:
        if current:
            found.append(Command(start, "\n".join(current), "\n".join(shown)))
        current.clear()
        shown.clear()

    for number, line in enumerate(section.splitlines(), start=offset + 1):
        if line.startswith("```"):
            if in_console:
                close()
            in_console = not in_console and line.strip() == "```console"
            continue
        if not in_console:
            continue
        if current and current[-1].endswith("\\") and not shown:
            current.append(line)
        elif line.startswith("$ "):
            close()
            start = number
            current.append(line[2:])
        elif current:
            shown.append(line)
    if in_console:
        raise ValueError("README.md's walkthrough has a console block that is never closed")
    return found


def script(steps: list[Command]) -> str:
    """One bash script running every step in order, marking where each begins and how it ended; it stops at
    the first step that fails, as a reader would."""
    lines = ["set -o pipefail", "exec 2>&1"]
    for index, step in enumerate(steps):
        lines += [
            f"echo '{STEP}{index}'",
            step.text,
            "status=$?",
            # On a line of its own, after an output that does not end its last line (curl's JSON).
            f'echo; echo "{DONE}{index}:$status"',
            f'if [ "$status" -ne {step.exit_code} ]; then exit 1; fi',
        ]
    return "\n".join(lines) + "\n"


def run(steps: list[Command], cwd: Path, env: dict[str, str], timeout: float) -> list[Outcome]:
    """Runs ``steps`` in one bash in ``cwd``; the outcome of each, in order (steps after a failure have
    none)."""
    try:
        completed = subprocess.run(
            ["bash", "--noprofile", "--norc"],
            input=script(steps),
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        output = completed.stdout
    except subprocess.TimeoutExpired as error:
        raw = error.stdout or b""
        output = raw.decode() if isinstance(raw, bytes) else raw
    outcomes = []
    for index, step in enumerate(steps):
        begin = f"{STEP}{index}\n"
        if begin not in output:
            break
        body = output.split(begin, 1)[1]
        done = re.search(rf"^{re.escape(DONE)}{index}:(\d+)$", body, re.MULTILINE)
        if done is None:
            outcomes.append(Outcome(step, None, body.split(STEP, 1)[0]))
            break
        outcomes.append(Outcome(step, int(done.group(1)), body[: done.start()]))
    return outcomes


def report(steps: list[Command], outcomes: list[Outcome]) -> list[str]:
    """Each step that does not do what the README says, with its README line and what it printed; a step
    never reached is named too."""
    problems = []
    for outcome in outcomes:
        problem = outcome.problem()
        if problem:
            tail = "\n".join(outcome.output.strip().splitlines()[-15:])
            problems.append(f"README.md:{outcome.command.line}: {outcome.command.text!r} {problem}:\n{tail}")
    if len(outcomes) < len(steps) and not problems:
        problems.append(f"README.md:{steps[len(outcomes)].line}: never ran")
    return problems


def shell_environment(**extra: str) -> dict[str, str]:
    """A reader's shell: their PATH and home, a terminal's width, and none of this process's settings (no
    DATABASE_URL, no AWS variables), so the commands find the system the way the README says they do."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")
    return {**{name: os.environ[name] for name in keep if name in os.environ}, "COLUMNS": "100", **extra}
