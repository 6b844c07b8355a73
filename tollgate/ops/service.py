"""The operations dispatcher: runs one admin or support command for a verified caller and returns its typed
result. Every use case is the one the local CLI calls; this module only routes to it, names the caller in
the audit trail, and audits the admin changes that have no audit of their own.

Admin changes (tenants, keys, suppliers, unverified IBANs, retention, budgets) run in the use case's own
transaction, so their audit cannot share it. As with ``dlq move-all``, the request is recorded first
(``requested``), then the change is made, then its outcome (``done``, ``refused`` or ``failed``): a crash in
between leaves a request without an outcome, never a change nobody recorded. What can be checked without
writing (scopes, that the tenant exists) is checked before the first row, so a request refused there writes
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel, ValidationError

from tollgate.core.clock import Clock, IdFactory
from tollgate.core.errors import InvalidRequest, TollgateError
from tollgate.db import Database
from tollgate.ops import models as m
from tollgate.review.models import ReviewDecisionRequest
from tollgate.review.service import (
    ReviewDeps,
    Reviewer,
    decide_review,
    find_review_tenant,
    get_review,
    list_all_reviews,
    list_reviews,
)
from tollgate.support import service as support
from tollgate.support.service import SupportDeps, record_audit
from tollgate.tenants.keys import ALL_SCOPES, create_key, create_tenant, list_keys, parse_scopes, revoke_key
from tollgate.tenants.listing import list_tenants
from tollgate.tenants.retention import set_tenant_retention
from tollgate.tenants.suppliers import add_supplier, find_tenant, set_accept_unverified_iban
from tollgate.tenants.usage_keys import UsagePlan, sync_usage_keys
from tollgate.usage.service import get_usage, parse_usage_query, set_monthly_budget, utc_today

T = TypeVar("T")


@dataclass(frozen=True)
class Caller:
    """Who asks: an IAM principal's ARN as Lambda verified it from the request's signature."""

    arn: str
    account: str | None = None


@dataclass(frozen=True)
class OpsDeps:
    """The support dependencies (database, queues, dispatcher), the review dependencies and the usage plan
    new tenants' API Gateway keys go on, built once per process; each request gets a copy of ``support``
    that names its caller."""

    support: SupportDeps
    reviews: ReviewDeps
    usage_plan: UsagePlan

    @property
    def db(self) -> Database:
        return self.support.db

    @property
    def clock(self) -> Clock:
        return self.support.clock

    @property
    def new_id(self) -> IdFactory:
        return self.support.new_id


def run_command(deps: OpsDeps, caller: Caller, request: BaseModel) -> BaseModel:
    """Runs ``request`` (one of ``tollgate.ops.models``' commands) for ``caller``. Domain refusals raise
    ``TollgateError``; an unreachable database or AWS service raises its own error (the caller maps both)."""
    if not 1 <= len(caller.arn) <= m.CALLER_MAX:
        raise InvalidRequest(f"the caller's ARN is longer than the audit trail keeps ({m.CALLER_MAX})")
    handler = _HANDLERS.get(type(request))
    if handler is None:
        raise InvalidRequest(f"no such command: {type(request).__name__}")
    return handler(replace(deps.support, actor=caller.arn), deps, caller, request)


# Audit of the admin changes.


def _record(deps: SupportDeps, action: str, target: str, outcome: str, details: dict[str, Any]) -> int:
    with deps.db.transaction() as conn:
        return record_audit(
            conn,
            deps,
            f"{action} through the operations function",
            action=action,
            target=target,
            outcome=outcome,
            details=details,
        )


def _audited(
    deps: SupportDeps, action: str, target: str, details: dict[str, Any], change: Callable[[], T]
) -> tuple[T, int]:
    """``change`` between a ``requested`` row and its outcome row; returns its result and the request's
    audit id."""
    requested = _record(deps, action, target, "requested", details)
    try:
        done = change()
    except TollgateError as error:
        _record(deps, action, target, "refused", {"requested": requested, "detail": error.detail[:1000]})
        raise
    except Exception as error:
        failure = f"{type(error).__name__}: {error}"[:1000]
        _record(deps, action, target, "failed", {"requested": requested, "error": failure})
        raise
    _record(deps, action, target, "done", {"requested": requested})
    return done, requested


def _scopes(names: list[str] | None) -> frozenset[Any]:
    return parse_scopes(names) if names else ALL_SCOPES


# One function per command.


def _create_tenant(deps: SupportDeps, ops: OpsDeps, _caller: Caller, r: m.CreateTenant) -> m.TenantCreated:
    scopes = _scopes(r.scopes)
    tenant, audit_id = _audited(
        deps,
        "tenant_create",
        r.name,
        {"scopes": sorted(scopes)},
        lambda: create_tenant(deps.db, r.name, deps.new_id, scopes=scopes, usage_plan=ops.usage_plan),
    )
    return m.TenantCreated(
        tenant_id=tenant.tenant_id,
        name=tenant.name,
        api_key=tenant.api_key,
        key_prefix=tenant.key_prefix,
        audit_id=audit_id,
    )


def _list_tenants(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.ListTenants) -> m.TenantList:
    return m.TenantList(tenants=list_tenants(deps.db, r.limit))


def _add_supplier(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.AddSupplier) -> m.Audited:
    tenant_id = find_tenant(deps.db, r.tenant)
    _, audit_id = _audited(
        deps,
        "tenant_add_supplier",
        str(tenant_id),
        {"tenant": r.tenant, "supplier": r.supplier, "iban": r.iban is not None},
        lambda: add_supplier(deps.db, tenant_id, r.supplier, r.iban, deps.new_id),
    )
    return m.Audited(audit_id=audit_id)


def _set_retention(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.SetRetention) -> m.Audited:
    tenant_id = find_tenant(deps.db, r.tenant)
    _, audit_id = _audited(
        deps,
        "tenant_set_retention",
        str(tenant_id),
        {"tenant": r.tenant, "days": r.days},
        lambda: set_tenant_retention(deps.db, tenant_id, r.days),
    )
    return m.Audited(audit_id=audit_id)


def _set_unverified_ibans(
    deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.SetUnverifiedIbans
) -> m.Audited:
    tenant_id = find_tenant(deps.db, r.tenant)
    _, audit_id = _audited(
        deps,
        "tenant_unverified_ibans",
        str(tenant_id),
        {"tenant": r.tenant, "accept": r.accept},
        lambda: set_accept_unverified_iban(deps.db, tenant_id, r.accept),
    )
    return m.Audited(audit_id=audit_id)


def _set_budget(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.SetBudget) -> m.Audited:
    tenant_id = find_tenant(deps.db, r.tenant)
    budget = None if r.monthly_usd is None else str(r.monthly_usd)
    _, audit_id = _audited(
        deps,
        "tenant_budget",
        str(tenant_id),
        {"tenant": r.tenant, "monthly_usd": budget},
        lambda: set_monthly_budget(deps.db, tenant_id, r.monthly_usd),
    )
    return m.Audited(audit_id=audit_id)


def _sync_usage_keys(
    deps: SupportDeps, ops: OpsDeps, _caller: Caller, _: m.SyncUsageKeys
) -> m.UsageKeysSynced:
    synced, audit_id = _audited(
        deps, "tenant_sync_usage_keys", "usage-plan", {}, lambda: sync_usage_keys(deps.db, ops.usage_plan)
    )
    return m.UsageKeysSynced(tenants=synced, audit_id=audit_id)


def _create_key(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.CreateKey) -> m.KeyCreated:
    scopes = _scopes(r.scopes)
    tenant_id = find_tenant(deps.db, r.tenant)
    key, audit_id = _audited(
        deps,
        "key_create",
        str(tenant_id),
        {"tenant": r.tenant, "scopes": sorted(scopes)},
        lambda: create_key(deps.db, tenant_id, deps.new_id, scopes=scopes),
    )
    return m.KeyCreated(
        key_id=key.key_id,
        api_key=key.api_key,
        key_prefix=key.key_prefix,
        scopes=sorted(key.scopes),
        audit_id=audit_id,
    )


def _list_keys(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.ListKeys) -> m.KeyList:
    rows = list_keys(deps.db, find_tenant(deps.db, r.tenant))
    return m.KeyList(keys=[m.KeyView.model_validate(row) for row in rows])


def _revoke_key(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.RevokeKey) -> m.Audited:
    tenant_id = find_tenant(deps.db, r.tenant)
    _, audit_id = _audited(
        deps,
        "key_revoke",
        str(r.key_id),
        {"tenant": r.tenant, "tenant_id": str(tenant_id)},
        lambda: revoke_key(deps.db, deps.clock, tenant_id, r.key_id),
    )
    return m.Audited(audit_id=audit_id)


def _list_jobs(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.ListJobs) -> m.JobList:
    return m.JobList(
        jobs=support.list_jobs(deps.db, state=r.state, tenant=r.tenant, job_type=r.job_type, limit=r.limit)
    )


def _show_job(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.ShowJob) -> support.JobDetail:
    return support.show_job(deps.db, r.job_id)


def _retry_job(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.RetryJob) -> m.Audited:
    return m.Audited(audit_id=support.retry_job(deps, r.job_id, r.reason))


def _list_dead_letters(
    deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.ListDeadLetters
) -> m.DeadLetters:
    items = support.list_dead_letters(deps, r.limit, r.job_type)
    return m.DeadLetters(items=[m.DeadLetterView.of(item) for item in items])


def dead_letter_body(item: support.RedriveItem) -> Any:
    """A dead letter's body as JSON when it is an event, else its text under ``unparseable_body``."""
    letter = item.letter
    return json.loads(letter.body) if letter.event else {"unparseable_body": letter.body}


def _show_dead_letter(
    deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.ShowDeadLetter
) -> m.DeadLetterShown:
    item = support.show_dead_letter(deps, r.message_id, r.job_type)
    return m.DeadLetterShown(item=m.DeadLetterView.of(item), body=dead_letter_body(item))


def _redrive(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.RedriveDeadLetters) -> m.Redriven:
    report = support.redrive_dead_letters(
        deps,
        reason=r.reason,
        dry_run=r.dry_run,
        max_per_second=r.max_per_second,
        include_failed=r.include_failed,
        limit=r.limit,
        job_type=r.job_type,
    )
    return m.Redriven(dry_run=r.dry_run, items=[m.DeadLetterView.of(item) for item in report.items])


def _move_all(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.MoveAllDeadLetters) -> m.MovesStarted:
    moves = support.move_all_dead_letters(deps, r.reason, r.max_per_second, r.job_type)
    return m.MovesStarted(moves=[m.MoveView.of(move) for move in moves])


def _list_endpoints(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.ListEndpoints) -> BaseModel:
    return support.list_tenant_endpoints(deps.db, r.tenant)


def _list_deliveries(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.ListDeliveries) -> BaseModel:
    return support.list_tenant_deliveries(deps.db, r.tenant, r.endpoint, r.limit)


def _replay_delivery(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.ReplayDelivery) -> m.Audited:
    _, audit_id = support.replay_delivery_audited(deps, r.tenant, r.endpoint, r.delivery, r.reason)
    return m.Audited(audit_id=audit_id)


def _list_reviews(deps: SupportDeps, ops: OpsDeps, _caller: Caller, r: m.ListReviews) -> BaseModel:
    if r.tenant is None:
        return list_all_reviews(deps.db, reason=r.reason, limit=r.limit, cursor=None)
    return list_reviews(deps.db, find_tenant(deps.db, r.tenant), reason=r.reason, limit=r.limit, cursor=None)


def _show_review(deps: SupportDeps, ops: OpsDeps, _caller: Caller, r: m.ShowReview) -> BaseModel:
    return get_review(ops.reviews, find_review_tenant(deps.db, r.job_id), r.job_id)


def _decide_review(deps: SupportDeps, ops: OpsDeps, caller: Caller, r: m.DecideReview) -> BaseModel:
    try:
        decision = ReviewDecisionRequest(decision=r.decision, note=r.note, corrections=r.corrections)
    except ValidationError as error:
        raise InvalidRequest(
            "; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())
        ) from None
    tenant_id = find_review_tenant(deps.db, r.job_id)
    version = r.expect_version or get_review(ops.reviews, tenant_id, r.job_id).state_version
    return decide_review(
        ops.reviews,
        tenant_id,
        r.job_id,
        decision,
        expected_version=version,
        reviewer=Reviewer(caller.arn),
        audited=True,
    )


def _usage(deps: SupportDeps, _ops: OpsDeps, _caller: Caller, r: m.GetUsage) -> BaseModel:
    query = parse_usage_query(r.from_day, r.to_day, r.group_by, today=utc_today(deps.clock.now()))
    if r.tenant is None:
        return get_usage(deps.db, None, query)
    # One tenant's report, in its own scope (as the API reads it), labelled with its name.
    tenant_id: UUID = find_tenant(deps.db, r.tenant)
    report = get_usage(deps.db, tenant_id, query)
    return report.model_copy(
        update={
            "rows": [row.model_copy(update={"tenant": r.tenant}) for row in report.rows],
            "total": report.total.model_copy(update={"tenant": r.tenant}),
        }
    )


_HANDLERS: dict[type[BaseModel], Callable[[SupportDeps, OpsDeps, Caller, Any], BaseModel]] = {
    m.CreateTenant: _create_tenant,
    m.ListTenants: _list_tenants,
    m.AddSupplier: _add_supplier,
    m.SetRetention: _set_retention,
    m.SetUnverifiedIbans: _set_unverified_ibans,
    m.SetBudget: _set_budget,
    m.SyncUsageKeys: _sync_usage_keys,
    m.CreateKey: _create_key,
    m.ListKeys: _list_keys,
    m.RevokeKey: _revoke_key,
    m.ListJobs: _list_jobs,
    m.ShowJob: _show_job,
    m.RetryJob: _retry_job,
    m.ListDeadLetters: _list_dead_letters,
    m.ShowDeadLetter: _show_dead_letter,
    m.RedriveDeadLetters: _redrive,
    m.MoveAllDeadLetters: _move_all,
    m.ListEndpoints: _list_endpoints,
    m.ListDeliveries: _list_deliveries,
    m.ReplayDelivery: _replay_delivery,
    m.ListReviews: _list_reviews,
    m.ShowReview: _show_review,
    m.DecideReview: _decide_review,
    m.GetUsage: _usage,
}
