-- API tokens. Only the SHA-256 digest of a secret is stored (hex, unique
-- across tenants, since a request names no tenant before its token is
-- resolved). scopes is a space-separated list. expires_at and revoked_at are
-- NULL for never and not revoked.
CREATE TABLE tokens (
	tenant_id  text COLLATE "C" NOT NULL REFERENCES tenants (id),
	id         text COLLATE "C" NOT NULL,
	digest     text COLLATE "C" NOT NULL UNIQUE,
	owner      text NOT NULL DEFAULT '',
	scopes     text NOT NULL,
	created_at timestamptz NOT NULL,
	expires_at timestamptz,
	revoked_at timestamptz,
	PRIMARY KEY (tenant_id, id)
);
