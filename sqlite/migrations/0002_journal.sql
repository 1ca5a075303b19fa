-- The command journal and leases, as package sqldb uses them.

-- A command's result: the signal that killed it, whether its retained output
-- was cut, and the revision its checkpoint committed. Its duration is
-- wall_millis.
ALTER TABLE commands ADD COLUMN signal TEXT NOT NULL DEFAULT '';
ALTER TABLE commands ADD COLUMN truncated INTEGER NOT NULL DEFAULT 0; -- 0 or 1
ALTER TABLE commands ADD COLUMN revision_after INTEGER NOT NULL DEFAULT 0;

-- An event holds output bytes in data, or a JSON object in fields.
ALTER TABLE events ADD COLUMN fields TEXT NOT NULL DEFAULT '';

-- A computer has at most one unreleased lease. AcquireLease already ensures
-- it by compare-and-swap on the generation; the index makes it a fact of the
-- schema.
CREATE UNIQUE INDEX leases_one_open ON leases (tenant_id, computer_id) WHERE released_at IS NULL;
-- The reaper's scan (ListExpiredLeases), across tenants.
CREATE INDEX leases_expiry ON leases (expires_at, tenant_id, id) WHERE released_at IS NULL;
