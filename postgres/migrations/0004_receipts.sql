-- Receipts and external references.

-- work_job_id is a caller's external reference (a job in its own system),
-- given when a computer is created or a command is run, and stated in
-- receipts. A command without one takes its computer's.
ALTER TABLE computers ADD COLUMN work_job_id text NOT NULL DEFAULT '';
ALTER TABLE commands ADD COLUMN work_job_id text NOT NULL DEFAULT '';
-- The computer's revision when the command was dispatched.
ALTER TABLE commands ADD COLUMN revision_before bigint NOT NULL DEFAULT 0;
-- The computer's revision when the lease was acquired, and when it was
-- released (while a lease is unreleased only it commits, so the second is
-- what its last checkpoint left).
ALTER TABLE leases ADD COLUMN revision_before bigint NOT NULL DEFAULT 0;
ALTER TABLE leases ADD COLUMN revision_after bigint NOT NULL DEFAULT 0;

-- One receipt per command or lease: of two issuers racing, one stores it.
DROP INDEX receipts_subject;
CREATE UNIQUE INDEX receipts_subject ON receipts (tenant_id, subject_kind, subject_id);
CREATE INDEX receipts_created ON receipts (tenant_id, created_at, id);
