"""The model accuracy benchmark's pure parts, without the model: which confusion cell a job lands in, the
rates and their denominators, the sample set, and the server's readiness line."""

from __future__ import annotations

import pytest

from bench.model_accuracy import (
    CELLS,
    CORRECT_EXPECTED_REVIEW,
    CORRECT_NEEDLESS_REVIEW,
    CORRECT_SUCCEEDED,
    FAILED_OTHER,
    INVALID_OUTPUT,
    WRONG_CAUGHT,
    WRONG_SILENT,
    classify,
    confusion,
    listening_url,
    pick_samples,
    sample_policy,
    spread,
    structured_output_setting,
    truth_passes_policy,
)
from tollgate.settings import WorkerSettings
from tollgate_dev.samples import CONSISTENT_KINDS, INCONSISTENT_TOTAL, KINDS


@pytest.mark.parametrize(
    ("state", "correct", "truth_passes", "outcome", "cell"),
    [
        ("SUCCEEDED", True, True, "ok", CORRECT_SUCCEEDED),
        ("SUCCEEDED", False, True, "ok", WRONG_SILENT),
        # A wrong answer that passed the policy on a document that breaks it (the model "fixed" the total).
        ("SUCCEEDED", False, False, "ok", WRONG_SILENT),
        ("REVIEW_REQUIRED", False, True, "ok", WRONG_CAUGHT),
        ("REVIEW_REQUIRED", True, True, "ok", CORRECT_NEEDLESS_REVIEW),
        ("REVIEW_REQUIRED", True, False, "ok", CORRECT_EXPECTED_REVIEW),
        ("FAILED_TERMINAL", False, True, "invalid_output", INVALID_OUTPUT),
        ("FAILED_TERMINAL", False, True, "timeout", FAILED_OTHER),
    ],
)
def test_each_job_lands_in_the_cell_of_its_outcome_against_truth(state, correct, truth_passes, outcome, cell):
    assert classify(state, correct, truth_passes, outcome) == cell


def test_rates_are_shares_of_their_own_denominators():
    cells = [CORRECT_SUCCEEDED] * 6 + [CORRECT_NEEDLESS_REVIEW] * 2 + [WRONG_CAUGHT] * 3 + [WRONG_SILENT]
    cells += [CORRECT_EXPECTED_REVIEW, INVALID_OUTPUT]

    table = confusion(cells)

    assert table["documents"] == 14
    assert table["cells"][WRONG_SILENT] == table["silently_wrong"] == 1
    assert table["caught_rate"] == 3 / 4, "of the wrong extractions, how many review caught"
    assert table["needless_review_rate"] == 2 / 8, (
        "of correct extractions that should pass, how many went to review"
    )
    assert table["silently_wrong_rate"] == 1 / 14
    assert table["failed"] == 1
    assert list(table["cells"]) == list(CELLS)


def test_an_empty_run_has_no_rates_and_an_unknown_cell_is_refused():
    empty = confusion([])
    assert empty["caught_rate"] is None and empty["needless_review_rate"] is None
    with pytest.raises(ValueError, match="unknown"):
        confusion(["correct"])


def test_spread_reports_mean_median_and_p95():
    assert spread([]) == {"n": 0, "mean": None, "p50": None, "p95": None, "max": None}
    figures = spread([float(n) for n in range(1, 21)])
    assert figures["n"] == 20 and figures["mean"] == 10.5 and figures["p50"] == 10.5
    assert figures["p95"] == 19.0 and figures["max"] == 20.0


def test_the_readiness_line_gives_a_loopback_url_and_nothing_else_does():
    assert listening_url("listening on http://127.0.0.1:45487\n") == "http://127.0.0.1:45487"
    assert listening_url("listening on http://0.0.0.0:45487") is None
    assert listening_url("model loaded") is None


def test_the_sample_set_covers_every_kind_and_a_limit_takes_its_start():
    full = pick_samples(40, 15, None)
    assert len(full) == 40
    assert {s.kind for s in full} == set(KINDS)
    assert {s.kind for s in pick_samples(40, 15, 5)} == set(KINDS), "five samples already hold every kind"
    assert [s.pages for s in pick_samples(40, 15, 3)] == [s.pages for s in full[:3]]


def test_only_a_document_that_breaks_the_policy_expects_review_of_a_correct_extraction():
    policy = sample_policy()
    for sample in pick_samples(10, 15, None):
        assert truth_passes_policy(sample, policy) == (sample.kind in CONSISTENT_KINDS), sample.kind
    assert INCONSISTENT_TOTAL not in CONSISTENT_KINDS


def test_the_structured_output_setting_is_passed_when_the_worker_has_it():
    extra, described = structured_output_setting("json_object")
    if "provider_structured_output" in WorkerSettings.model_fields:
        assert extra == {"provider_structured_output": "json_object"}
        assert described["worker_sends"] == "json_object"
    else:
        assert extra == {}
        assert described["worker_sends"] == "json_schema" and "note" in described
