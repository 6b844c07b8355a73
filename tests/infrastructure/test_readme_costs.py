"""README.md's idle cost table is what ``tollgate_dev.costs`` gives for the synthesized stages: a change to a
stack that makes a stage cost more (or less) at idle fails here until ``make costs`` rewrites the table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stacks.config import REPO_ROOT
from tests.infrastructure.synth import StageSynth
from tollgate_dev.costs import _replace, idle_costs, stage_names, table_drift, table_from_templates, total

pytestmark = pytest.mark.infrastructure

README = REPO_ROOT / "README.md"


Templates = Callable[[str], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def stage_templates(stage_synth: Callable[[str], StageSynth]) -> Templates:
    """A stage's templates in the order `make costs` reads them (by file name)."""
    return lambda stage: [template for _, template in sorted(stage_synth(stage).templates.items())]


@pytest.fixture(scope="module")
def table(stage_templates: Templates) -> str:
    """The table for every stage of cdk.json, as `make costs` would write it."""
    return table_from_templates({stage: stage_templates(stage) for stage in stage_names()})


def test_the_readme_cost_table_is_what_the_templates_give(table: str) -> None:
    drift = table_drift(README.read_text(encoding="utf-8"), table)

    assert drift == [], "README.md's idle cost table is out of date: run `make costs`\n" + "\n".join(drift)


def test_a_wrong_figure_in_the_readme_is_caught(table: str, stage_templates: Templates) -> None:
    # Given a README whose dev total is off by a cent
    dev_total = f"**${total(idle_costs(stage_templates('dev'))):,.2f}**"
    assert dev_total in table
    planted = _replace(README.read_text(encoding="utf-8"), table.replace(dev_total, "**$0.01**", 1))

    # When it is compared with the templates, then the total's line is named, as README has it and as it
    # should be
    drift = table_drift(planted, table)

    assert len(drift) == 2
    assert drift[0].startswith("-| **idle total a month** | **$0.01**")
    assert drift[1].startswith("+| **idle total a month** | " + dev_total)


def test_the_dev_stage_pauses_when_no_client_is_connected(
    stage_templates: Templates,
) -> None:
    """The notifier's one-minute sweep is declared to reach PostgreSQL only while clients are connected: idle,
    dev's cluster is awake only around its half-hourly ticks; a connected client keeps it awake."""
    dev = stage_templates("dev")

    idle = {line.item: line for line in idle_costs(dev)}
    connected = {line.item: line for line in idle_costs(dev, clients_connected=True)}

    aurora = "Aurora Serverless v2 capacity"
    assert idle[aurora].monthly_usd < 0.5 * connected[aurora].monthly_usd
    assert "awake 100% of the time" in connected[aurora].detail
    assert connected[aurora].monthly_usd == pytest.approx(0.5 * 0.12 * 730)
