-- Evidence located by the policy (validation.v3, summary.v2, classification.v2; issue 29): where on the page
-- the policy found each value and the label that names it there, recorded with the result it judged, so the
-- review view and /result show what the policy read, not what the model quoted. NULL for results judged by
-- an earlier policy, which located nothing. A reviewer's corrected version records its own.
ALTER TABLE extraction_results ADD COLUMN located_evidence jsonb;
ALTER TABLE review_decisions ADD COLUMN located_evidence jsonb;

-- A supplier without an IBAN on file: an extracted IBAN cannot be checked against master data, so it goes to
-- review (iban_unverified) unless the tenant opts out.
ALTER TABLE tenants ADD COLUMN accept_unverified_iban boolean NOT NULL DEFAULT false;
