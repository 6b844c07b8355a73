"""``tollgate reviews``: the review queue, one job's review, and decisions, for reviewers at a terminal.

The commands call the review use cases the API calls (``tollgate.review.service``), as the system role, with
settings found as every command finds them (``tollgate.cli.connect``). A decision made here is also written
to the support audit trail, in its own transaction.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar
from uuid import UUID

import typer

from tollgate.cli.connect import command_settings
from tollgate.cli.options import DEFAULT_DATA_DIR, DataDir, Output, OutputOption
from tollgate.cli.remote import command, remote
from tollgate.cli.support import _fail, _json, _line, _table, _when
from tollgate.core.errors import TollgateError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from tollgate.ops import models as ops
    from tollgate.review.models import ReviewView
    from tollgate.review.service import ReviewDeps
else:
    from tollgate.cli.lazy import Deferred

    ops = Deferred("tollgate.ops.models")

reviews_app = typer.Typer(help="Results waiting for review: list, show, decide.", no_args_is_help=True)

# The support audit trail's limits on a reason and an actor (migration 0006).
NOTE_MIN, NOTE_MAX, REVIEWER_MAX = 3, 1000, 200


def _note(value: str) -> str:
    if not NOTE_MIN <= len(value.strip()) <= NOTE_MAX:
        raise typer.BadParameter(
            f"say why in {NOTE_MIN} to {NOTE_MAX} characters: it is kept with the decision"
        )
    return value.strip()


def _reason(value: str | None) -> str | None:
    """A reason code some policy gives, checked before anything is looked at."""
    if value is None:
        return None
    from tollgate.jobtypes.registry import REVIEW_REASONS

    if value not in REVIEW_REASONS:
        raise typer.BadParameter(f"{value!r} is not a review reason; one of: {', '.join(REVIEW_REASONS)}")
    return value


R = TypeVar("R", bound="BaseModel")


def _in_stage(model: type[BaseModel], result: type[R], **fields: Any) -> R | None:
    """In stage mode, the command's result from the stage's operations function; None in local mode."""
    function = remote()
    if function is None:
        return None
    try:
        return function.call(command(model, **fields), result)
    except TollgateError as error:
        _fail(_problem(error))


@contextmanager
def _reviews(data_dir: Path) -> Iterator[ReviewDeps]:
    import psycopg
    from psycopg_pool import PoolTimeout

    from tollgate.settings import SupportDatabaseSettings
    from tollgate.wiring import build_review_cli

    try:
        settings, aws = command_settings(SupportDatabaseSettings, data_dir)
    except TollgateError as error:
        _fail(error.detail)
    deps = build_review_cli(settings, aws=aws)
    try:
        yield deps
    except TollgateError as error:
        _fail(_problem(error))
    except (psycopg.OperationalError, PoolTimeout) as error:
        _fail(f"cannot reach the database: {error}", code=1)
    finally:
        deps.db.close()


def _problem(error: TollgateError) -> str:
    """The problem's detail, and each reason a refused correction still breaks."""
    lines = [error.detail]
    for reason in error.extensions.get("reasons") or ():
        lines.append(f"  - {reason['code']} ({reason['field']}): {reason['detail']}")
    for item in error.extensions.get("errors") or ():
        lines.append(f"  - {'.'.join(item['loc'])}: {item['msg']}")
    return "\n".join(lines)


@reviews_app.command("list")
def reviews_list(
    reason: Annotated[
        str | None,
        typer.Option(
            help="Only results that broke this rule (a reason code such as total_mismatch).", callback=_reason
        ),
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's (by name).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    output: OutputOption = Output.TABLE,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Results waiting for review, the longest waiting first."""
    from tollgate.review.models import ReviewPage
    from tollgate.review.service import list_all_reviews, list_reviews
    from tollgate.tenants.suppliers import find_tenant

    listed = _in_stage(ops.ListReviews, ReviewPage, reason=reason, tenant=tenant, limit=limit)
    if listed is not None:
        page = listed
    else:
        with _reviews(data_dir) as deps:
            if tenant is None:
                page = list_all_reviews(deps.db, reason=reason, limit=limit, cursor=None)
            else:
                page = list_reviews(
                    deps.db, find_tenant(deps.db, tenant), reason=reason, limit=limit, cursor=None
                )
    if output is Output.JSON:
        _json(page.items)
        return
    _table(
        f"{len(page.items)} review(s) waiting" + (" (more: raise --limit)" if page.next_cursor else ""),
        ["job id", "tenant", "waiting since", "version", "reasons"],
        [
            [
                item.job_id,
                item.tenant or tenant,
                item.waiting_since,
                item.state_version,
                " ".join(item.reason_codes),
            ]
            for item in page.items
        ],
    )


@reviews_app.command("show")
def reviews_show(
    job_id: UUID, output: OutputOption = Output.TABLE, data_dir: DataDir = DEFAULT_DATA_DIR
) -> None:
    """A job's review: the model's result, the rules it broke, and each value's evidence in the document."""
    from tollgate.review.models import ReviewView as ReviewShown
    from tollgate.review.service import find_review_tenant, get_review

    shown = _in_stage(ops.ShowReview, ReviewShown, job_id=job_id)
    if shown is not None:
        view = shown
    else:
        with _reviews(data_dir) as deps:
            view = get_review(deps, find_review_tenant(deps.db, job_id), job_id)
    if output is Output.JSON:
        _json(view)
        return
    _print_review(view)


def _print_review(view: ReviewView) -> None:
    _line(f"job            {view.job_id}")
    _line(f"state          {view.state} (version {view.state_version}: decide with --expect-version)")
    _line(f"waiting since  {_when(view.waiting_since)}")
    _line(f"policy         {view.policy_version}")
    _line(f"reasons        {len(view.reasons)}")
    for reason in view.reasons:
        _line(f"  - {reason.code} ({reason.field}): {reason.detail}")
    _line("evidence")
    for item in view.evidence:
        where = f"page {item.page}, {item.start}-{item.end}" if item.found else "NOT FOUND in the document"
        _line(f"  {item.field}: {item.value}")
        if item.located:
            label = f'under "{item.label.text}" ({item.label.field})' if item.label else "with no label"
            _line(f"    found   by the policy, {where}, {label}")
        _line(f"    quote   {json.dumps(item.quote) if item.quote is not None else '(none given)'}")
        if not item.located:
            _line(f"            the quote is {'at ' + where if item.found else where}")
        if item.context is not None:
            marked = f"{item.context.before}[[{item.context.text}]]{item.context.after}"
            _line(f"    context {json.dumps(marked, ensure_ascii=False)}")
    _line("result (version 1, not accepted)")
    _line(json.dumps(view.result, indent=2, sort_keys=True))
    if view.decision is not None:
        d = view.decision
        _line(
            f"decision       {d.decision} by {d.reviewer} at {_when(d.decided_at)} on version "
            f"{d.decided_on_version}: {d.note}"
        )


@reviews_app.command("decide")
def reviews_decide(
    job_id: UUID,
    note: Annotated[
        str, typer.Option(help="Why: kept with the decision and in the audit trail.", callback=_note)
    ],
    approve: Annotated[bool, typer.Option("--approve", help="Accept the model's result as it is.")] = False,
    correct: Annotated[
        Path | None,
        typer.Option(
            "--correct",
            help="Accept a corrected result: a JSON file with a merge patch (RFC 7396) onto the invoice.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    reject: Annotated[bool, typer.Option("--reject", help="Accept nothing: the job ends REJECTED.")] = False,
    reviewer: Annotated[
        str | None,
        typer.Option(envvar="TOLLGATE_ACTOR", help="Who decides, on record (default: your login name)."),
    ] = None,
    expect_version: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="The state_version you reviewed (`reviews show`); without it, the version read just before "
            "deciding. With it, a decision someone made since your look is refused instead of overridden.",
        ),
    ] = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
) -> None:
    """Approve, correct or reject a result waiting for review (audited)."""
    from pydantic import ValidationError

    from tollgate.review.models import Decision, ReviewDecided, ReviewDecisionRequest
    from tollgate.review.service import Reviewer, decide_review, find_review_tenant, get_review

    chosen = [
        d
        for d, wanted in ((Decision.APPROVE, approve), (Decision.CORRECT, correct), (Decision.REJECT, reject))
        if wanted
    ]
    if len(chosen) != 1:
        _fail("choose one of --approve, --correct FILE, --reject")
    corrections: Any = None
    if correct is not None:
        try:
            corrections = json.loads(correct.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            _fail(f"cannot read {correct} as JSON: {error}")
    try:
        request = ReviewDecisionRequest(decision=chosen[0], note=note, corrections=corrections)
    except ValidationError as error:
        _fail("; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors()))
    fields = {"job_id": job_id, "decision": chosen[0], "note": note, "corrections": corrections}
    decided_there = _in_stage(ops.DecideReview, ReviewDecided, **fields, expect_version=expect_version)
    if decided_there is not None:
        # The stage records the verified IAM identity as the reviewer, whatever --reviewer says.
        _line(
            f"job {job_id} is {decided_there.state} (version {decided_there.state_version}): "
            f"{decided_there.decision} by your IAM identity"
            + (f", result version {decided_there.result_version}" if decided_there.result_version else "")
        )
        return
    who = Reviewer((reviewer or getpass.getuser()).strip())
    if not 1 <= len(who.name) <= REVIEWER_MAX:
        _fail(f"the reviewer's name has 1 to {REVIEWER_MAX} characters")
    with _reviews(data_dir) as deps:
        tenant_id = find_review_tenant(deps.db, job_id)
        version = expect_version or get_review(deps, tenant_id, job_id).state_version
        decided = decide_review(
            deps, tenant_id, job_id, request, expected_version=version, reviewer=who, audited=True
        )
    _line(
        f"job {job_id} is {decided.state} (version {decided.state_version}): {decided.decision} by {who.name}"
        + (f", result version {decided.result_version}" if decided.result_version else "")
    )
