"""A tenant's commands for trying Tollgate out: ``tollgate submit`` sends a job over the HTTP API (and follows
it with ``--wait``), ``tollgate jobs watch`` prints state changes from the live feed. They talk to the API and
the feed as any tenant does, with the tenant's API key; nothing here reads the database.

Imports stay inside the commands (``tollgate.client``, the WebSocket client), so ``tollgate --help`` and the
other commands start as fast as they did.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from tollgate.cli.options import Output, OutputOption

if TYPE_CHECKING:
    from tollgate.client.api import ApiProblem, TenantApi

LOCAL_API_URL = "http://127.0.0.1:8080"
LOCAL_FEED_URL = "ws://127.0.0.1:8083"
# Exit codes: 0 done (SUCCEEDED, or a watch whose jobs all finished); 1 the job failed, was rejected or
# cancelled, the wait ran out, or the API, the feed or the network failed; 2 the request was refused as
# input (a 4xx but 429, or a bad file or option: nothing was accepted); 3 the result waits for a reviewer;
# 130 stopped with Ctrl-C.
EXIT_FAILED, EXIT_INPUT, EXIT_REVIEW, EXIT_INTERRUPTED = 1, 2, 3, 130


ApiUrl = Annotated[
    str,
    typer.Option(
        "--api", envvar="TOLLGATE_API_URL", help="The API's base URL (default: the local system's)."
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--key",
        envvar="TOLLGATE_API_KEY",
        help="The tenant's API key (tg_...); prefer TOLLGATE_API_KEY, which other users' `ps` cannot read.",
        show_default=False,
    ),
]


def register(app: typer.Typer, jobs_app: typer.Typer) -> None:
    """Adds ``submit`` to the top level and ``watch`` to ``tollgate jobs``."""
    app.command("submit")(submit)
    jobs_app.command("watch")(jobs_watch)


def _say(text: str) -> None:
    typer.echo(text)


def _note(text: str) -> None:
    typer.echo(text, err=True)


def _fail(lines: list[str] | str, code: int) -> NoReturn:
    for number, text in enumerate([lines] if isinstance(lines, str) else lines):
        typer.echo(("error: " if number == 0 else "       ") + text, err=True)
    raise typer.Exit(code)


def _problem(problem: ApiProblem) -> NoReturn:
    _fail(problem.lines(), EXIT_INPUT if problem.input_problem else EXIT_FAILED)


def _key(key: str | None) -> str:
    if not key:
        _fail("give the tenant's API key with TOLLGATE_API_KEY (or --key)", EXIT_INPUT)
    return key


def _json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


def submit(
    file: Annotated[
        Path,
        typer.Argument(
            help='A request body as in examples/ ({"document": ..., "options": ...}), or only a document '
            '({"pages": [{"text": ...}]}, or {"s3_key", "version_id"}), which becomes the body\'s '
            "document.",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ],
    job_type: Annotated[
        str | None,
        typer.Option(
            "--type",
            help="The job type: invoice_extraction, document_summary or document_classification (GET "
            "/openapi.json lists them). Default: the file's job_type, else the API's (invoice_extraction).",
        ),
    ] = None,
    options: Annotated[
        str | None,
        typer.Option(
            "--options",
            help='The type\'s options as JSON, over the file\'s: \'{"labels": ["invoice", "receipt"]}\'.',
        ),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Follow the job until it is finished, then print its result (or why it waits for review).",
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds --wait follows the job before giving up.")
    ] = 600.0,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="Sent as Idempotency-Key: the same key and body again answer with the same job. Default: a "
            "new key each run, printed, so each run is a new job.",
        ),
    ] = None,
    api: ApiUrl = LOCAL_API_URL,
    key: ApiKey = None,
    output: OutputOption = Output.TABLE,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Print only the job's id (for a shell variable); the exit code still says how it ended.",
        ),
    ] = False,
) -> None:
    """Submit a job from FILE and print its id and Location; with --wait, follow it and print how it ended.

    Exit codes: 0 SUCCEEDED (or accepted, without --wait); 1 FAILED_TERMINAL, REJECTED or CANCELLED, the
    wait ran out, or the API could not be reached or failed; 2 the API refused the request as input (its
    problem is printed) or FILE is not JSON; 3 the result waits for a reviewer."""
    import time
    import uuid

    from tollgate.client.api import ApiProblem, ApiUnreachable, TenantApi
    from tollgate.client.bodies import BadInput, request_body
    from tollgate.client.follow import StillRunning, wait_for_job

    api_key = _key(key)
    if quiet and output is Output.JSON:
        _fail("--quiet prints only the id; leave out --output json", EXIT_INPUT)
    talk = output is Output.TABLE and not quiet
    try:
        body = request_body(file.read_text(encoding="utf-8"), job_type, options)
    except (BadInput, UnicodeDecodeError) as error:
        _fail(f"{file}: {error}", EXIT_INPUT)
    sent_key = idempotency_key or f"cli-{uuid.uuid4()}"
    client = TenantApi(api, api_key)
    try:
        answer = client.submit(body, sent_key)
    except ApiProblem as problem:
        _problem(problem)
    except ApiUnreachable as error:
        _fail([f"cannot reach the API: {error}", "is `tollgate local up` running, or is --api right?"], 1)
    job: dict[str, Any] = answer.body
    headers = {name.lower(): value for name, value in answer.headers.items()}
    location = client.absolute(headers.get("location") or job["links"]["self"])
    replayed = headers.get("idempotent-replayed") == "true"
    accepted = {"location": location, "idempotency_key": sent_key, "replayed": replayed}
    _say_accepted(job, accepted, quiet=quiet, talk=talk)
    if not wait:
        if output is Output.JSON:
            _json({**accepted, "job": job})
        elif talk:
            _say(f"state           {job['state']} (version {job['state_version']})")
        return

    def changed(view: dict[str, Any]) -> None:
        if talk:
            _say(f"state           {view['state']} (version {view['state_version']})")

    def retrying(error: Exception) -> None:
        _note(f"note: {error}; asking again")

    try:
        final = wait_for_job(
            lambda: client.job(location),
            timeout=timeout,
            clock=time.monotonic,
            sleep=time.sleep,
            on_change=changed,
            on_retry=retrying,
            first=job,
        )
    except StillRunning as still:
        _fail(f"{still}: follow it with `tollgate jobs watch {job['job_id']}`", EXIT_FAILED)
    except ApiProblem as problem:
        _problem(problem)
    _finish(client, final, output, accepted, quiet=quiet)


def _say_accepted(job: dict[str, Any], accepted: dict[str, Any], *, quiet: bool, talk: bool) -> None:
    if quiet:
        _say(str(job["job_id"]))
    if talk:
        _say(f"job             {job['job_id']}")
        _say(f"location        {accepted['location']}")
        replayed = "  (replayed: this key was used before)" if accepted["replayed"] else ""
        _say(f"idempotency key {accepted['idempotency_key']}{replayed}")
        _say(f"type            {job['job_type']}")


def _finish(
    client: TenantApi, job: dict[str, Any], output: Output, accepted: dict[str, Any], *, quiet: bool = False
) -> NoReturn:
    """Prints how the job ended and exits with its code (quiet: only exits)."""
    from tollgate.client.api import ApiProblem, ApiUnreachable

    state = job["state"]
    code = {"SUCCEEDED": 0, "REVIEW_REQUIRED": EXIT_REVIEW}.get(state, EXIT_FAILED)
    if quiet:
        raise typer.Exit(code)
    result: dict[str, Any] | None = None
    reasons: list[dict[str, Any]] | None = None
    unread = None
    try:
        if state == "SUCCEEDED":
            result = client.job(job["links"]["result"])
        elif state == "REVIEW_REQUIRED":
            reasons = list(client.job(f"{job['links']['self']}/review").get("reasons", []))
    except (ApiProblem, ApiUnreachable) as error:
        # The job's state is the answer; its result or review could not be read (say, a key without review).
        unread = str(error)
    if output is Output.JSON:
        _json({**accepted, "job": job, "result": result, "review_reasons": reasons, "unread": unread})
        raise typer.Exit(code)
    usage = job.get("usage") or {}
    if usage:
        _say(
            f"usage           {usage.get('attempts')} attempt(s), {usage.get('input_tokens')} tokens in, "
            f"{usage.get('output_tokens')} out, {usage.get('cost_usd')} USD"
        )
    if result is not None:
        _say(f"result          version {result.get('version')}, policy {result.get('policy_version')}")
        _json(result.get("result"))
    elif reasons is not None:
        _say(f"review reasons  {len(reasons)}: a reviewer decides (GET {job['links']['self']}/review)")
        for reason in reasons:
            _say(f"  - {reason.get('code')} ({reason.get('field')}): {reason.get('detail')}")
    elif job.get("last_error"):
        _say(f"why             {json.dumps(job['last_error'], default=str)}")
    if unread is not None:
        _note(f"note: could not read the {'result' if state == 'SUCCEEDED' else 'review'}: {unread}")
    raise typer.Exit(code)


def jobs_watch(
    job_ids: Annotated[
        list[str] | None,
        typer.Argument(
            help="Jobs to watch; the watch ends when each is finished. Without any: every job of the tenant, "
            "until Ctrl-C.",
            show_default=False,
        ),
    ] = None,
    cursor: Annotated[
        int | None,
        typer.Option(
            "--cursor",
            min=0,
            help="Replay the changes after this sequence number first (a watch prints where it stopped).",
        ),
    ] = None,
    through_review: Annotated[
        bool,
        typer.Option(
            "--through-review",
            help="A job waiting for review is not done yet: wait for the reviewer's decision too.",
        ),
    ] = False,
    feed: Annotated[
        str,
        typer.Option(
            "--feed",
            envvar="TOLLGATE_FEED_URL",
            help="The live feed's WebSocket URL (default: the local system's).",
        ),
    ] = LOCAL_FEED_URL,
    api: ApiUrl = LOCAL_API_URL,
    key: ApiKey = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Print each state change of the tenant's jobs (or of JOB_IDs) from the live feed, in order; resumes
    after a dropped connection from the last change printed. A named job already finished is printed as it
    is now ("now" instead of a sequence number).

    Exit codes: 0 every named job finished; 1 the feed could not be reached; 2 a refused key, job id or
    cursor; 130 stopped with Ctrl-C (the cursor to resume from is printed on stderr)."""
    from uuid import UUID

    from tollgate.client.api import ApiProblem, ApiUnreachable, TenantApi
    from tollgate.client.watch import FeedLost, JobWatch, WatchRefused

    api_key = _key(key)
    wanted = []
    for job_id in job_ids or []:
        try:
            wanted.append(str(UUID(job_id)))
        except ValueError:
            _fail(f"{job_id!r} is not a job id", EXIT_INPUT)
    client = TenantApi(api, api_key)

    def show(message: dict[str, Any]) -> None:
        if output is Output.JSON:
            typer.echo(json.dumps(message, default=str))
        elif message["type"] == "resync":
            why = message.get("reason")
            _say(f"resync: changes were missed ({why}); going on after #{message['latest']}")
        else:
            number = "now" if message["type"] == "job.snapshot" else f"#{message['sequence']}"
            _say(
                f"{number:<6} {message.get('occurred_at') or '-'}  {message['job_id']}  "
                f"{message.get('job_type') or '-'}  {message['state']} (version {message['state_version']})"
            )

    watch = JobWatch(
        url=feed,
        api_key=api_key,
        on_change=show,
        job_ids=wanted,
        cursor=cursor,
        snapshot=lambda job: client.job(f"/extraction-jobs/{job}"),
        through_review=through_review,
        on_note=lambda text: _note(f"note: {text}"),
    )
    try:
        watch.run()
    except KeyboardInterrupt:
        watch.close()
        _note(f"stopped; `tollgate jobs watch --cursor {watch.cursor}` resumes after the last change printed")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except WatchRefused as refused:
        _fail(str(refused), EXIT_INPUT if refused.input_problem else EXIT_FAILED)
    except ApiProblem as problem:
        _problem(problem)
    except (ApiUnreachable, FeedLost) as error:
        _fail(str(error), EXIT_FAILED)
    finally:
        sys.stdout.flush()
