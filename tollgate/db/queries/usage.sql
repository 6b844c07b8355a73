-- Usage and spend (migration 0016): the counters the triggers keep, read by GET /usage, `tollgate usage`,
-- admission and the worker; the announcement of spend thresholds; budgets set by support staff. Nothing here
-- reads job_attempts or counts jobs: each read is an index range of the aggregate rows or one row by key.

-- name: tenant_month_spend
-- One row when the tenant exists: its budget (NULL: none), its month's spent and reserved cost, and the
-- system's month from its 16 shards. Admission reads it under the tenant's acceptance lock; the worker
-- reads it before each provider call.
SELECT t.monthly_budget_usd AS budget,
       coalesce(s.spent_usd, 0) AS spent,
       coalesce(s.reserved_usd, 0) AS reserved,
       (SELECT coalesce(sum(spent_usd), 0) FROM system_spend WHERE month = %(month)s) AS system_spent,
       (SELECT coalesce(sum(reserved_usd), 0) FROM system_spend WHERE month = %(month)s) AS system_reserved
FROM tenants t
LEFT JOIN tenant_spend s ON s.tenant_id = t.tenant_id AND s.month = %(month)s
WHERE t.tenant_id = %(tenant_id)s

-- name: announce_spend_thresholds
-- In the transaction that recorded an attempt's cost (the trigger added it to spent_usd): the highest
-- threshold (80 or 100 percent of the budget) the month has now reached, if it is above the one already
-- announced. The row lock taken here makes the announcement once per tenant, month and threshold, whatever
-- the number of workers finishing at once. A row back says which thresholds to announce (previous, reached].
WITH month_row AS (
    SELECT s.tenant_id, s.month, s.spent_usd, s.notified_percent, t.monthly_budget_usd AS budget
    FROM tenant_spend s JOIN tenants t USING (tenant_id)
    WHERE s.tenant_id = %(tenant_id)s AND s.month = %(month)s AND t.monthly_budget_usd IS NOT NULL
      AND s.spent_usd > 0
    FOR UPDATE OF s
), reached AS (
    SELECT month_row.*,
           CASE WHEN spent_usd >= budget THEN 100 WHEN spent_usd >= budget * 0.8 THEN 80 ELSE 0 END AS percent
    FROM month_row
)
UPDATE tenant_spend s
SET notified_percent = reached.percent
FROM reached
WHERE s.tenant_id = reached.tenant_id AND s.month = reached.month
  AND reached.percent > reached.notified_percent
RETURNING reached.notified_percent AS previous, reached.percent AS reached, reached.budget,
          reached.spent_usd AS spent

-- name: defer_running_job_for_budget
-- The worker made no call because the tenant's or the system's budget would be crossed: the job waits for
-- the next month (the caller checked it starts before the deadline). Conditioned like finish_running_job.
-- No call went out, so the attempt was ours to cut short, as a release is: on its last attempt the budget of
-- attempts grows by one, or no claim could take it again.
UPDATE extraction_jobs
SET state = 'RETRY_SCHEDULED', lease_owner = NULL, lease_until = NULL, next_attempt_at = %(next_attempt_at)s,
    max_attempts = greatest(max_attempts, attempt + 1), state_version = state_version + 1,
    updated_at = %(now)s, last_error = %(last_error)s
WHERE job_id = %(job_id)s AND state = 'RUNNING' AND fence = %(fence)s AND lease_until > %(now)s
RETURNING job_id, tenant_id, state_version, trace_context

-- name: set_tenant_monthly_budget
-- NULL removes the budget.
UPDATE tenants SET monthly_budget_usd = %(budget)s WHERE tenant_id = %(tenant_id)s RETURNING tenant_id

-- name: usage_by_attempts
-- Attempts, tokens and cost over an inclusive range of UTC days, for one tenant (%(tenant_id)s) or all
-- (NULL, support staff as tollgate_system), summed over the dimensions not asked for: each by_* flag keeps
-- its dimension, else it collapses to NULL. Of those attempts, the ones made through a provider batch and
-- what the batch price saved (migration 0020).
SELECT CASE WHEN %(by_tenant)s::boolean THEN t.name END AS tenant,
       CASE WHEN %(by_day)s::boolean THEN u.day END AS day,
       CASE WHEN %(by_job_type)s::boolean THEN u.job_type END AS job_type,
       CASE WHEN %(by_model)s::boolean THEN u.model END AS model,
       sum(u.attempts)::bigint AS attempts,
       sum(u.input_tokens)::bigint AS input_tokens,
       sum(u.output_tokens)::bigint AS output_tokens,
       sum(u.cost_usd) AS cost_usd,
       sum(u.batch_attempts)::bigint AS batch_attempts,
       sum(u.discount_usd) AS batch_discount_usd
FROM usage_daily u JOIN tenants t USING (tenant_id)
WHERE (%(tenant_id)s::uuid IS NULL OR u.tenant_id = %(tenant_id)s::uuid)
  AND u.day BETWEEN %(from_day)s AND %(to_day)s
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4

-- name: usage_by_jobs
-- Finished and completed jobs with the totals of the completed ones, grouped like usage_by_attempts (there
-- is no model: a completed job's attempts may have used several).
SELECT CASE WHEN %(by_tenant)s::boolean THEN t.name END AS tenant,
       CASE WHEN %(by_day)s::boolean THEN u.day END AS day,
       CASE WHEN %(by_job_type)s::boolean THEN u.job_type END AS job_type,
       sum(u.finished_jobs)::bigint AS finished_jobs,
       sum(u.completed_jobs)::bigint AS completed_jobs,
       sum(u.completed_cost_usd) AS completed_cost_usd
FROM usage_jobs_daily u JOIN tenants t USING (tenant_id)
WHERE (%(tenant_id)s::uuid IS NULL OR u.tenant_id = %(tenant_id)s::uuid)
  AND u.day BETWEEN %(from_day)s AND %(to_day)s
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
