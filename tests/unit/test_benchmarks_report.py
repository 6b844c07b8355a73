"""BENCHMARKS.md says what the results files say: it is generated from them, and it cannot drift."""

import json
import shutil
from pathlib import Path

import pytest

from bench import report

RESULTS = report.RESULTS_DIR
DOCUMENT = report.OUTPUT


@pytest.fixture
def results_copy(tmp_path: Path) -> Path:
    """The committed results and BENCHMARKS.md, copied so that a test can change one without the other."""
    folder = tmp_path / "results"
    shutil.copytree(RESULTS, folder, ignore=shutil.ignore_patterns("*.tmp"))
    shutil.copy(DOCUMENT, tmp_path / "BENCHMARKS.md")
    return folder


def edit(path: Path, change) -> None:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


def check(results: Path) -> int:
    return report.main(
        ["--check", "--results", str(results), "--output", str(results.parent / "BENCHMARKS.md")]
    )


def test_benchmarks_md_is_what_the_results_files_generate():
    expected = report.render(report.load_results(RESULTS))
    assert DOCUMENT.read_text() == expected, "run `python -m bench.report` and commit BENCHMARKS.md"


def test_check_passes_while_the_document_and_the_results_agree(results_copy):
    assert check(results_copy) == 0


def test_check_fails_when_a_results_file_changes_under_the_document(results_copy, capsys):
    # Given a new relay run whose median rate differs from the one the document quotes
    def faster(document):
        document["throughput"][1]["per_s"]["median"] *= 2

    edit(results_copy / "relay.json", faster)

    # When the document is checked, then it fails and shows the figure that moved
    assert check(results_copy) == 1
    assert "disagrees with the results files" in capsys.readouterr().out


def test_check_fails_when_the_document_is_edited_by_hand(results_copy):
    document = results_copy.parent / "BENCHMARKS.md"
    document.write_text(document.read_text().replace("| 2 |", "| 4 |", 1))
    assert check(results_copy) == 1


def test_every_section_names_its_file_and_run():
    text = DOCUMENT.read_text()
    for name, results in report.load_results(RESULTS).items():
        assert f"Figures from `bench/results/{name}.json`, run of {report.run_date(results)}" in text


def test_a_request_answered_unexpectedly_is_reported_not_hidden(results_copy):
    # Given an acceptance run in which one replayed request got a 500
    def one_error(document):
        replay = next(row for row in document["throughput"] if row["kind"] == "replay")
        replay["statuses"] = {"202 replayed": replay["requests"] - 1, "500": 1}

    edit(results_copy / "acceptance.json", one_error)

    # Then the acceptance section says so, with the row it happened in
    text = report.render(report.load_results(results_copy))
    assert "Requests that did not get the expected answer:" in text
    assert "1 answered 500 of" in text


def test_a_run_that_recorded_no_machine_says_so(results_copy):
    edit(results_copy / "accuracy.json", lambda document: document.pop("machine", None))
    text = report.render(report.load_results(results_copy))
    accuracy_row = next(line for line in text.splitlines() if line.startswith("| `accuracy.json`"))
    assert accuracy_row.count("not recorded") >= 5


def test_the_command_of_an_older_run_is_rebuilt_from_its_configuration(results_copy):
    # Given a drain run that predates recorded commands, made with a smaller backlog and two limiters
    def older(document):
        document.pop("command", None)
        document["config"]["heavy_jobs"] = 500
        document["config"]["scenarios"] = ["global", "no_limit"]

    edit(results_copy / "drain.json", older)
    text = report.render(report.load_results(results_copy))
    assert "python -m bench.drain --heavy-jobs 500 --scenarios global,no_limit" in text
    assert "command rebuilt from the run's recorded configuration" in text


def test_a_benchmark_without_results_is_listed_as_not_measured(results_copy):
    (results_copy / "accuracy.json").unlink()
    text = report.render(report.load_results(results_copy))
    assert "No results file for: `python -m bench.accuracy`." in text


def test_the_recorded_command_leaves_out_where_the_results_were_written():
    from bench.machine import command_line

    assert command_line("bench.relay", ["--output", "elsewhere.json", "--rounds", "2"]) == (
        "python -m bench.relay --rounds 2"
    )
    assert command_line("bench.drain", ["--quick", "--output=x.json"]) == "python -m bench.drain --quick"


def test_the_scale_targets_are_held_or_missed_by_the_recorded_figures(results_copy):
    # Given a scale run whose worst claim costs 2x the plain claim, and then one where it costs 4x
    for worst, verdict in ((2.0, "held"), (4.0, "**missed**")):

        def claim_at(document, worst=worst):
            document["summary"]["claim"]["worst_over_plain_p50"] = worst

        edit(results_copy / "scale.json", claim_at)

        # Then the scale section checks the 3x target against that figure
        text = report.render(report.load_results(results_copy))
        times = report.TIMES
        assert f"claim ≤ 3{times} the plain claim at every size: {verdict} (worst {worst:.2f}{times}" in text


def test_a_scale_claim_that_took_a_job_it_should_not_have_is_reported(results_copy):
    # Given a scale run in which three claims took a job of a tenant with nothing runnable
    def wrong_picks(document):
        document["summary"]["claim"]["wrong_picks"] = 3

    edit(results_copy / "scale.json", wrong_picks)

    # Then the section says so rather than reporting the time alone
    text = report.render(report.load_results(results_copy))
    assert "**3 measured claims took nothing, or a job of a tenant with nothing runnable.**" in text
    assert "Every measured claim took a job of a tenant with runnable work." not in text


def test_each_drain_profile_checks_the_light_tenants_against_its_own_target(results_copy):
    # Given a drain run and a many-tenants run whose light tenants' p95 both came to 4x one job
    def light_p95_at_4x(document):
        next(s for s in document["scenarios"] if s["key"] == "global")["light_p95_over_service"] = 4.0

    edit(results_copy / "drain.json", light_p95_at_4x)
    edit(results_copy / "drain_many.json", light_p95_at_4x)

    # Then 4x holds against the drain profile's 5x and misses the 3x for 1,000 light tenants
    text = report.render(report.load_results(results_copy))
    times = report.TIMES
    rows = [line for line in text.splitlines() if "p95 ÷ one job's service time" in line]
    drain_row = next(row for row in rows if row.startswith("| shared budget: "))
    many_row = next(row for row in rows if row.startswith("| shared budget, 1,000 light tenants: "))
    assert f"(target ≤ 5{times}) | 4.0{times}" in drain_row and "): held |" in drain_row
    assert f"(target ≤ 3{times}) | 4.0{times}" in many_row and "): **missed** |" in many_row
    assert f"light tenants' p95 within 3{times} one job's service time" in text


def test_an_open_loop_refusal_admission_did_not_owe_and_a_late_client_are_reported(results_copy):
    # Given an open-loop run in which one 503 came while the backlog was below its cap, and the client
    # sent its requests up to a second late
    def unowed_and_late(document):
        document["refusals"]["503"]["unmatched"] = 1
        document["client"].update(p99_s=0.9, kept_schedule=False)

    edit(results_copy / "openloop.json", unowed_and_late)

    # Then the section marks the 503s as missed and says the arrivals were not fully open-loop
    text = report.render(report.load_results(results_copy))
    assert next(line for line in text.splitlines() if "503s owed by the backlog cap" in line).endswith(
        "**missed** |"
    )
    assert "**The client fell behind its schedule**" in text


def test_the_batch_path_headline_is_its_cost_over_the_immediate_paths_from_the_same_run(results_copy):
    # Given a batch path run whose batch cost came to 0.55 of the immediate path's
    def at_055(document):
        document["summary"]["batch_over_immediate_cost"] = 0.55

    edit(results_copy / "batch_path.json", at_055)

    # Then the at-a-glance row and the section show that ratio beside both costs per 1,000 invoices
    text = report.render(report.load_results(results_copy))
    paths = json.loads((results_copy / "batch_path.json").read_text())["paths"]
    row = next(line for line in text.splitlines() if line.startswith("| batch path: cost per 1,000 invoices"))
    assert f"| ${paths['batch']['cost_per_1000_invoices_usd']} |" in row
    assert (
        f"immediate path: ${paths['immediate']['cost_per_1000_invoices_usd']} | 0.55{report.TIMES} |" in row
    )
    assert f"Batch cost ÷ immediate cost: 0.55{report.TIMES}." in text


def test_a_batch_path_run_with_problems_says_so(results_copy):
    def unsettled(document):
        document["paths"]["batch"]["errors"] = ["jobs still unsettled after 600 s"]

    edit(results_copy / "batch_path.json", unsettled)
    text = report.render(report.load_results(results_copy))
    assert "**Problems in this run:** batch: jobs still unsettled after 600 s." in text


def test_live_notifications_say_when_delivery_fell_behind_the_cancels(results_copy):
    # Given a live notifications run in which the larger shape's last message reached every client long
    # after the last cancel (a lag of half the time the cancels took)
    def behind(document):
        larger = document["shapes"][0]
        larger["lag_s"] = larger["cancel_s"] / 2

    text = report.render(report.load_results(results_copy))
    assert "Delivery kept pace with the cancels in every shape" in text
    edit(results_copy / "live_notifications.json", behind)

    # Then the section says delivery fell behind in that shape, rather than that it kept pace
    text = report.render(report.load_results(results_copy))
    assert f"**Delivery fell behind the cancels** in 1,000 jobs {report.TIMES} 50 clients" in text
    assert "Delivery kept pace with the cancels" not in text
