-- The initial schema. Every table but tenants has tenant_id first in its
-- primary key, and every query names the tenant. Tables are STRICT. Times are
-- TEXT in UTC with six fractional digits (sqldb.TimeLayout,
-- "2006-01-02T15:04:05.000000Z"), so that text order is time order.

CREATE TABLE tenants (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL DEFAULT '',
	hash_key   BLOB NOT NULL, -- 32-byte keyed BLAKE3 key; never leaves the server
	created_at TEXT NOT NULL
) STRICT;

CREATE TABLE computers (
	tenant_id       TEXT NOT NULL REFERENCES tenants (id),
	id              TEXT NOT NULL,
	owner           TEXT NOT NULL DEFAULT '',
	conversation_id TEXT NOT NULL DEFAULT '',
	label           TEXT NOT NULL DEFAULT '',
	profile         TEXT NOT NULL,
	state           TEXT NOT NULL,
	generation      INTEGER NOT NULL DEFAULT 0,
	revision        INTEGER NOT NULL DEFAULT 0,
	root_digest     TEXT NOT NULL DEFAULT '',
	created_at      TEXT NOT NULL,
	updated_at      TEXT NOT NULL,
	PRIMARY KEY (tenant_id, id)
) STRICT;
CREATE INDEX computers_created ON computers (tenant_id, created_at, id);
CREATE INDEX computers_conversation ON computers (tenant_id, conversation_id, created_at, id);
CREATE INDEX computers_label ON computers (tenant_id, label, created_at, id);
CREATE INDEX computers_state ON computers (tenant_id, state, created_at, id);

CREATE TABLE revisions (
	tenant_id   TEXT NOT NULL,
	computer_id TEXT NOT NULL,
	number      INTEGER NOT NULL,
	parent      INTEGER NOT NULL,
	generation  INTEGER NOT NULL,
	root_digest TEXT NOT NULL,
	size        INTEGER NOT NULL DEFAULT 0,
	file_count  INTEGER NOT NULL DEFAULT 0,
	created_by  TEXT NOT NULL DEFAULT '', -- a lease id or "api:<operation>"
	created_at  TEXT NOT NULL,
	PRIMARY KEY (tenant_id, computer_id, number),
	FOREIGN KEY (tenant_id, computer_id) REFERENCES computers (tenant_id, id) ON DELETE CASCADE
) STRICT;

-- The packs each revision references; garbage collection keeps exactly
-- these. Packs read back sorted by name.
CREATE TABLE revision_packs (
	tenant_id   TEXT NOT NULL,
	computer_id TEXT NOT NULL,
	number      INTEGER NOT NULL,
	pack        TEXT NOT NULL,
	PRIMARY KEY (tenant_id, computer_id, number, pack),
	FOREIGN KEY (tenant_id, computer_id, number) REFERENCES revisions (tenant_id, computer_id, number) ON DELETE CASCADE
) STRICT;
CREATE INDEX revision_packs_pack ON revision_packs (tenant_id, pack);

-- A lease is one runtime allocation of a computer, at one generation.
CREATE TABLE leases (
	tenant_id         TEXT NOT NULL,
	id                TEXT NOT NULL,
	computer_id       TEXT NOT NULL,
	generation        INTEGER NOT NULL,
	provider          TEXT NOT NULL,
	host              TEXT NOT NULL DEFAULT '',
	sandbox_ref       TEXT NOT NULL DEFAULT '', -- the provider's opaque, versioned handle, given back to Recover
	cpu_millis        INTEGER NOT NULL DEFAULT 0, -- reserved vCPU, in thousandths
	memory_bytes      INTEGER NOT NULL DEFAULT 0,
	scratch_bytes     INTEGER NOT NULL DEFAULT 0,
	credential_digest TEXT NOT NULL DEFAULT '', -- digest of the lease credential, never the credential
	reserved_at       TEXT NOT NULL,
	started_at        TEXT,
	ready_at          TEXT,
	heartbeat_at      TEXT,
	expires_at        TEXT,
	released_at       TEXT,
	disposition       TEXT NOT NULL DEFAULT '', -- '' while held, then e.g. released, quarantined, lost
	residue           TEXT NOT NULL DEFAULT '', -- JSON teardown evidence
	PRIMARY KEY (tenant_id, id),
	UNIQUE (tenant_id, computer_id, generation),
	FOREIGN KEY (tenant_id, computer_id) REFERENCES computers (tenant_id, id) ON DELETE CASCADE
) STRICT;
CREATE INDEX leases_open ON leases (provider, host) WHERE released_at IS NULL;

-- A command is one execution with a durable identity. State is one of
-- admitted, dispatched, may_have_started, running, completed, failed,
-- cancelled, timed_out, lost.
CREATE TABLE commands (
	tenant_id        TEXT NOT NULL,
	id               TEXT NOT NULL,
	computer_id      TEXT NOT NULL,
	idempotency_key  TEXT, -- NULL when the caller gave none
	argv             TEXT NOT NULL DEFAULT '', -- JSON array; '' for a script
	script           TEXT NOT NULL DEFAULT '',
	cwd              TEXT NOT NULL DEFAULT '',
	env_names        TEXT NOT NULL DEFAULT '', -- JSON array of names; values are never stored
	timeout_ms       INTEGER NOT NULL DEFAULT 0,
	tier             TEXT NOT NULL DEFAULT '',
	state            TEXT NOT NULL,
	exit_code        INTEGER,
	lease_id         TEXT, -- the lease and generation that ran it
	generation       INTEGER,
	last_seq         INTEGER NOT NULL DEFAULT 0, -- seq of its newest event
	output_digest    TEXT NOT NULL DEFAULT '',
	cpu_millis       INTEGER NOT NULL DEFAULT 0, -- usage
	wall_millis      INTEGER NOT NULL DEFAULT 0,
	max_memory_bytes INTEGER NOT NULL DEFAULT 0,
	output_bytes     INTEGER NOT NULL DEFAULT 0,
	created_at       TEXT NOT NULL,
	dispatched_at    TEXT,
	started_at       TEXT,
	finished_at      TEXT,
	updated_at       TEXT NOT NULL,
	PRIMARY KEY (tenant_id, id),
	UNIQUE (tenant_id, computer_id, idempotency_key),
	FOREIGN KEY (tenant_id, computer_id) REFERENCES computers (tenant_id, id) ON DELETE CASCADE
) STRICT;
CREATE INDEX commands_computer ON commands (tenant_id, computer_id, created_at, id);
CREATE INDEX commands_state ON commands (state, updated_at);

-- An event is one sequenced record of a command: seq counts 1, 2, 3… per
-- command; kind is stdout, stderr, exit or state; data holds output bytes or
-- JSON fields.
CREATE TABLE events (
	tenant_id  TEXT NOT NULL,
	command_id TEXT NOT NULL,
	seq        INTEGER NOT NULL,
	kind       TEXT NOT NULL,
	data       BLOB NOT NULL,
	created_at TEXT NOT NULL,
	PRIMARY KEY (tenant_id, command_id, seq),
	FOREIGN KEY (tenant_id, command_id) REFERENCES commands (tenant_id, id) ON DELETE CASCADE
) STRICT;

-- A receipt is signed evidence about a command or a lease. It has no foreign
-- key, so it outlives what it describes.
CREATE TABLE receipts (
	tenant_id    TEXT NOT NULL,
	id           TEXT NOT NULL,
	subject_kind TEXT NOT NULL, -- command or lease
	subject_id   TEXT NOT NULL,
	body         BLOB NOT NULL, -- the canonical JSON that was signed
	key_id       TEXT NOT NULL DEFAULT '', -- which signing key
	signature    BLOB NOT NULL, -- Ed25519 over body
	created_at   TEXT NOT NULL,
	PRIMARY KEY (tenant_id, id)
) STRICT;
CREATE INDEX receipts_subject ON receipts (tenant_id, subject_kind, subject_id);

-- Capacity admission. A scope is (scope_kind, scope_id): command, profile,
-- computer, conversation, owner, tenant, provider, region or global. Scopes
-- that belong to no tenant (provider, region, global) use tenant_id ''.
-- capacity holds each scope's limit and running total; admission reserves in
-- one transaction with, per scope,
--   UPDATE capacity SET reserved = reserved + ? WHERE ... AND reserved + ? <= ceiling
-- and rolls back if any scope matches no row.
CREATE TABLE capacity (
	tenant_id  TEXT NOT NULL,
	scope_kind TEXT NOT NULL,
	scope_id   TEXT NOT NULL,
	resource   TEXT NOT NULL, -- cpu_millis, memory_bytes, scratch_bytes, starts, ...
	ceiling    INTEGER NOT NULL,
	reserved   INTEGER NOT NULL DEFAULT 0,
	updated_at TEXT NOT NULL,
	PRIMARY KEY (tenant_id, scope_kind, scope_id, resource)
) STRICT;

-- reservations is the ledger behind capacity.reserved: what each admission
-- holds in each scope, so that releasing it subtracts exactly that.
CREATE TABLE reservations (
	tenant_id       TEXT NOT NULL,
	id              TEXT NOT NULL, -- one admission
	scope_tenant_id TEXT NOT NULL, -- the capacity row's tenant_id ('' for shared scopes)
	scope_kind      TEXT NOT NULL,
	scope_id        TEXT NOT NULL,
	resource        TEXT NOT NULL,
	amount          INTEGER NOT NULL,
	lease_id        TEXT,
	created_at      TEXT NOT NULL,
	expires_at      TEXT,
	PRIMARY KEY (tenant_id, id, scope_kind, scope_id, resource)
) STRICT;
CREATE INDEX reservations_scope ON reservations (scope_tenant_id, scope_kind, scope_id, resource);
