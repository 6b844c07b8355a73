"""The model accuracy benchmark's pure parts, without the model: which confusion cell a job lands in, the
rates and their denominators, the sample sets of every job type, the truth's verdicts, the per-type figures
and their report, and the server's readiness line."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest

import bench.model_accuracy
from bench import report
from bench.model_accuracy import (
    ASSUMED,
    BY_VALIDATE,
    CELLS,
    CLASSIFICATION,
    CORRECT_EXPECTED_REVIEW,
    CORRECT_NEEDLESS_REVIEW,
    CORRECT_SUCCEEDED,
    FAILED_OTHER,
    INVALID_OUTPUT,
    INVOICE,
    SCHEMA,
    SENDS_LABEL_GUIDES,
    SUMMARY,
    TYPES,
    WRONG_CAUGHT,
    WRONG_SILENT,
    Measured,
    classify,
    confusion,
    judge,
    listening_url,
    parse_args,
    pick_cases,
    pick_samples,
    recorded_arguments,
    sample_policy,
    spread,
    structured_output_setting,
    summarize,
    truth_passes_policy,
    truth_verdict,
)
from tollgate.settings import WorkerSettings
from tollgate_dev.document_samples import faithful_summary
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


# ------------------------------------------------------------------------- summaries and classifications


def config(**changes):
    return replace(parse_args([]), **changes)


def test_a_limit_takes_a_prefix_of_each_set_and_types_choose_the_sets():
    full = pick_cases(config())
    assert Counter(c.job_type for c in full) == {INVOICE: 40, SUMMARY: 12, CLASSIFICATION: 14}
    assert [c.job_type for c in full] == sorted((c.job_type for c in full), key=TYPES.index), "types in order"
    smoke = pick_cases(config(limit=2, types=(SUMMARY, CLASSIFICATION)))
    assert [(c.job_type, c.name) for c in smoke] == [
        (SUMMARY, "summary-01"),
        (SUMMARY, "summary-02"),
        (CLASSIFICATION, "classification-01"),
        (CLASSIFICATION, "classification-02"),
    ]
    by_name = {(c.job_type, c.name): c for c in full}
    assert all(c.body == by_name[(c.job_type, c.name)].body for c in smoke), "the same documents, first ones"
    assert [c.sample.pages for c in pick_cases(config(limit=3, types=(INVOICE,)))] == [
        s.pages for s in pick_samples(40, 15, 3)
    ], "the invoice set is unchanged"


def test_types_are_read_from_a_comma_list_in_run_order_and_unknown_ones_are_refused(capsys):
    assert parse_args(["--types", "document_classification,invoice_extraction"]).types == (
        INVOICE,
        CLASSIFICATION,
    )
    assert parse_args([]).types == TYPES
    with pytest.raises(SystemExit):
        parse_args(["--types", "invoices"])
    assert "job types are" in capsys.readouterr().err


def test_classification_requests_carry_label_guides_only_when_the_service_takes_them():
    guided = [c for c in pick_cases(config(types=(CLASSIFICATION,))) if c.sample.label_guides]
    assert guided
    for case in guided:
        assert ("label_guides" in case.body["options"]) == SENDS_LABEL_GUIDES


def _case(job_type, name):
    return next(c for c in pick_cases(config(types=(job_type,))) if c.name == name)


def test_the_truth_verdict_runs_the_types_own_validate_on_a_faithful_answer():
    policy = sample_policy()
    for case in pick_cases(config(types=(SUMMARY, CLASSIFICATION), limit=7)):
        verdict = truth_verdict(case, policy)
        assert verdict.method == BY_VALIDATE
        assert verdict.passes, (case.name, verdict.reasons)


def test_without_a_faithful_answer_the_schema_takes_every_document_is_assumed_to_pass(monkeypatch):
    # Given an output schema that refuses the faithful answer (as a newer one might)
    monkeypatch.setattr(bench.model_accuracy, "faithful_summary", lambda sample: {"text": "?"})
    verdict = truth_verdict(_case(SUMMARY, "summary-01"), sample_policy())
    assert verdict.passes and verdict.method == ASSUMED
    assert "refuses the faithful answer" in (verdict.note or "")


def test_the_judge_reads_the_stored_json_by_the_document():
    case = _case(SUMMARY, "summary-03")
    faithful = faithful_summary(case.sample)
    assert judge(case, faithful).correct
    wrong = {**faithful, "summary": faithful["summary"] + " A late fee of 999.00 applies."}
    assert not judge(case, wrong).correct and "999.00" in judge(case, wrong).problems[0]
    assert judge(case, None).problems == ("no result",)
    label = _case(CLASSIFICATION, "classification-06")
    assert judge(label, {"label": "payment_reminder", "evidence": None}).correct
    assert not judge(label, {"label": "invoice", "evidence": None}).correct
    invoice = pick_cases(config(types=(INVOICE,), limit=1))[0]
    assert not judge(invoice, None).correct


def measured(case, state, result, reasons=()):
    attempts = [
        {
            "outcome": "ok",
            "latency_ms": 2000,
            "input_tokens": 300,
            "output_tokens": 40,
            "error": None,
            "attempt": 1,
        }
    ]
    return Measured(case, state, result, "summary.v2", list(reasons), attempts, None, 2.5)


def test_each_type_reports_its_table_its_straight_through_rate_and_every_reviews_reasons():
    # Given four summaries: right and through, invented and through, right but reviewed, invented and reviewed
    cases = pick_cases(config(types=(SUMMARY,), limit=4))
    answers = [faithful_summary(c.sample) for c in cases]
    invented = [{**a, "summary": a["summary"] + " Total 123,456.78."} for a in answers]
    reason = {"code": "fact_value_not_in_quote", "field": "key_facts[1]", "detail": "24 is not in the quote"}
    runs = [
        measured(cases[0], "SUCCEEDED", answers[0]),
        measured(cases[1], "SUCCEEDED", invented[1]),
        measured(cases[2], "REVIEW_REQUIRED", answers[2], [reason]),
        measured(cases[3], "REVIEW_REQUIRED", invented[3], [reason, {**reason, "field": "key_facts[2]"}]),
    ]

    # When they are summarized
    figures = summarize(runs, sample_policy(), (SUMMARY,))

    # Then the type's table, rates and review reasons say what happened to each
    summary = figures["job_types"][SUMMARY]
    matrix = summary["confusion"]
    assert [
        matrix["cells"][c] for c in (CORRECT_SUCCEEDED, WRONG_SILENT, CORRECT_NEEDLESS_REVIEW, WRONG_CAUGHT)
    ] == [
        1,
        1,
        1,
        1,
    ]
    assert matrix["straight_through_rate"] == 1 / 4 and matrix["needless_review_rate"] == 1 / 2
    assert summary["truth_policy"] == {"method": BY_VALIDATE, "passing": 4, "documents": 4, "notes": []}
    assert summary["reviews"] == {
        "documents": 2,
        "by_code": {"fact_value_not_in_quote": {"documents": 2, "reasons": 3}},
    }
    rows = {row["name"]: row for row in summary["documents"]}
    assert rows["summary-04"]["review_reasons"][1]["field"] == "key_facts[2]"
    assert rows["summary-02"]["problems"] and rows["summary-02"]["answer"] == invented[1]
    assert rows["summary-01"]["answer"] is None, "a straight-through correct answer is not repeated"
    assert figures["overall"]["silently_wrong"] == 1 and figures["overall"]["documents"] == 4
    json.dumps(figures)  # the results file can hold it


def test_the_report_shows_each_types_figures_and_the_reasons_behind_each_review():
    cases = pick_cases(config(types=(SUMMARY, CLASSIFICATION), limit=1))
    reason = {"code": "label_cue_missing", "field": "label", "detail": "no cue | of receipt"}
    runs = [
        measured(cases[0], "SUCCEEDED", faithful_summary(cases[0].sample)),
        # The first classification document is an invoice: a receipt label is wrong, and review caught it
        measured(cases[1], "REVIEW_REQUIRED", {"label": "receipt", "evidence": None}, [reason]),
    ]
    document = {
        "schema": SCHEMA,
        "command": "python -m bench.model_accuracy --limit 1",
        "started_at": "2026-12-02T10:00:00+00:00",
        "duration_s": 95.0,
        "machine": {},
        "model": {"name": "Qwen", "quantization": "Q4_K_M", "bytes": 1.1e9, "source": "PyPI"},
        "engine": {
            "name": "node-llama-cpp",
            "version": "3",
            "build": "prebuilt",
            "threads": 2,
            "context_size": 8192,
        },
        "structured_output": {"worker_sends": "json_object"},
        "config": {**parse_args([]).__dict__, "limit": 1, "samples_seed": 15, "label_guides_sent": False}
        | {"decoding": "greedy", "max_attempts": 1},
        "server": {"finish_reasons": {"stop": 2}, "dropped_schema_keywords": []},
        **summarize(runs, sample_policy(), (SUMMARY, CLASSIFICATION)),
    }

    text = "\n".join(report.model_accuracy_section(document))

    assert "**A smoke run:**" in text
    assert "| `document_summary` | 1 | 1 | 0 | 0 |" in text
    assert "- Straight through (correct and SUCCEEDED, of all): 100.0%." in text
    assert "| `label_cue_missing` | 1 | 1 |" in text
    assert "- `classification-01` (invoice, en): caught" in text
    assert "  - wrong: label 'receipt', the true label is 'invoice'" in text
    assert "  - `label_cue_missing` label: no cue \\| of receipt" in text
    row = report._model_accuracy_summary(document)
    assert row[1] == "0 of 2" and "classification: 0 of 1 silently wrong" in row[2]


def test_the_recorded_command_leaves_out_the_cache_path():
    argv = ["--limit", "1", "--cache", "/some/machine/cache", "--types=document_summary", "--cache=/x"]
    assert recorded_arguments(argv) == ["--limit", "1", "--types=document_summary"]
