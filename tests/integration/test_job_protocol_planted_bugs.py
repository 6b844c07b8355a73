"""The job protocol's property run fails on a broken implementation: one rule of the protocol at a time is
broken in its SQL, and the run must report it. A property run that cannot fail proves nothing."""

from __future__ import annotations

import re

import psycopg
import pytest

from tests.integration.job_protocol import HUNT, PLANTED_BUGS, run_protocol
from tollgate.db import Database
from tollgate.db.queries import Queries, load_queries

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("bug", list(PLANTED_BUGS))
def test_the_property_run_finds_a_planted_protocol_bug(bug, system_db, app_db, clean_db):
    query, clause, report = PLANTED_BUGS[bug]
    queries = load_queries()
    texts = {name: getattr(queries, name) for name in queries.names()}
    assert clause in texts[query], f"{query} no longer says {clause!r}: plant the bug anew"
    texts[query] = texts[query].replace(clause, "")
    broken = Database(system_db.pool, system_db.role, Queries(texts))

    # Caught either by the model (its report) or, first, by a constraint of the schema that the broken query
    # runs into (a redrive of a RUNNING job breaks running_iff_leased): either way the run fails.
    with pytest.raises((AssertionError, psycopg.errors.IntegrityError)) as caught:
        run_protocol(broken, app_db, clean_db, HUNT)
    if isinstance(caught.value, AssertionError):
        assert re.search(report, str(caught.value)), caught.value
