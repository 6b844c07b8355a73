-- Job types (DESIGN §6): the registry in tollgate/jobtypes is the authority on which types exist, so a new
-- type needs no migration. The column keeps a check on the form of a name only. NOT VALID, then VALIDATE:
-- the existing rows are read once under a lock that lets writes go on.
ALTER TABLE extraction_jobs DROP CONSTRAINT extraction_jobs_job_type_check;
ALTER TABLE extraction_jobs ADD CONSTRAINT extraction_jobs_job_type_form
    CHECK (job_type ~ '^[a-z][a-z0-9_]{0,62}$') NOT VALID;
ALTER TABLE extraction_jobs VALIDATE CONSTRAINT extraction_jobs_job_type_form;

-- Escalation: a result the small model got wrong sends the job's next attempt to the large model. Set with
-- the retry it causes (finish_running_job), read by the claim; a constant default adds no table rewrite.
ALTER TABLE extraction_jobs ADD COLUMN model_escalated boolean NOT NULL DEFAULT false;
