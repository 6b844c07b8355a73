"""Property test of the job state machine and the lease/fence protocol against real PostgreSQL: random
interleavings of workers' moves and what goes on around them, checked against a model after every step (the
machine is in job_protocol)."""

from __future__ import annotations

import pytest

from tests.integration.job_protocol import RUN, run_protocol

pytestmark = pytest.mark.integration


def test_random_interleavings_keep_the_job_protocol(system_db, app_db, clean_db):
    run_protocol(system_db, app_db, clean_db, RUN)
