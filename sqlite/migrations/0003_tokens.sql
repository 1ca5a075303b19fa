-- API tokens. Only the SHA-256 digest of a secret is stored (hex, unique
-- across tenants, since a request names no tenant before its token is
-- resolved). scopes is a space-separated list. expires_at and revoked_at are
-- NULL for never and not revoked.
CREATE TABLE tokens (
	tenant_id  TEXT NOT NULL REFERENCES tenants (id),
	id         TEXT NOT NULL,
	digest     TEXT NOT NULL UNIQUE,
	owner      TEXT NOT NULL DEFAULT '',
	scopes     TEXT NOT NULL,
	created_at TEXT NOT NULL,
	expires_at TEXT,
	revoked_at TEXT,
	PRIMARY KEY (tenant_id, id)
) STRICT;
