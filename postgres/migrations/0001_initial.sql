-- The initial schema. Every table but tenants has tenant_id first in its
-- primary key, and every query names the tenant. Identifiers, digests and
-- pack names use the "C" collation so that ORDER BY is byte order, as in
-- SQLite and Go. Times are timestamptz (UTC, microseconds).

CREATE TABLE tenants (
	id         text COLLATE "C" PRIMARY KEY,
	name       text NOT NULL DEFAULT '',
	hash_key   bytea NOT NULL, -- 32-byte keyed BLAKE3 key; never leaves the server
	created_at timestamptz NOT NULL
);

CREATE TABLE computers (
	tenant_id       text COLLATE "C" NOT NULL REFERENCES tenants (id),
	id              text COLLATE "C" NOT NULL,
	owner           text NOT NULL DEFAULT '',
	conversation_id text NOT NULL DEFAULT '',
	label           text NOT NULL DEFAULT '',
	profile         text NOT NULL,
	state           text NOT NULL,
	generation      bigint NOT NULL DEFAULT 0,
	revision        bigint NOT NULL DEFAULT 0,
	root_digest     text COLLATE "C" NOT NULL DEFAULT '',
	created_at      timestamptz NOT NULL,
	updated_at      timestamptz NOT NULL,
	PRIMARY KEY (tenant_id, id)
);
CREATE INDEX computers_created ON computers (tenant_id, created_at, id);
CREATE INDEX computers_conversation ON computers (tenant_id, conversation_id, created_at, id);
CREATE INDEX computers_label ON computers (tenant_id, label, created_at, id);
CREATE INDEX computers_state ON computers (tenant_id, state, created_at, id);

CREATE TABLE revisions (
	tenant_id   text COLLATE "C" NOT NULL,
	computer_id text COLLATE "C" NOT NULL,
	number      bigint NOT NULL,
	parent      bigint NOT NULL,
	generation  bigint NOT NULL,
	root_digest text COLLATE "C" NOT NULL,
	size        bigint NOT NULL DEFAULT 0,
	file_count  bigint NOT NULL DEFAULT 0,
	created_by  text NOT NULL DEFAULT '', -- a lease id or "api:<operation>"
	created_at  timestamptz NOT NULL,
	PRIMARY KEY (tenant_id, computer_id, number),
	FOREIGN KEY (tenant_id, computer_id) REFERENCES computers (tenant_id, id) ON DELETE CASCADE
);

-- The packs each revision references; garbage collection keeps exactly
-- these. Packs read back sorted by name.
CREATE TABLE revision_packs (
	tenant_id   text COLLATE "C" NOT NULL,
	computer_id text COLLATE "C" NOT NULL,
	number      bigint NOT NULL,
	pack        text COLLATE "C" NOT NULL,
	PRIMARY KEY (tenant_id, computer_id, number, pack),
	FOREIGN KEY (tenant_id, computer_id, number) REFERENCES revisions (tenant_id, computer_id, number) ON DELETE CASCADE
);
CREATE INDEX revision_packs_pack ON revision_packs (tenant_id, pack);

-- A lease is one runtime allocation of a computer, at one generation.
CREATE TABLE leases (
	tenant_id         text COLLATE "C" NOT NULL,
	id                text COLLATE "C" NOT NULL,
	computer_id       text COLLATE "C" NOT NULL,
	generation        bigint NOT NULL,
	provider          text NOT NULL,
	host              text NOT NULL DEFAULT '',
	sandbox_ref       text NOT NULL DEFAULT '', -- the provider's opaque, versioned handle, given back to Recover
	cpu_millis        bigint NOT NULL DEFAULT 0, -- reserved vCPU, in thousandths
	memory_bytes      bigint NOT NULL DEFAULT 0,
	scratch_bytes     bigint NOT NULL DEFAULT 0,
	credential_digest text NOT NULL DEFAULT '', -- digest of the lease credential, never the credential
	reserved_at       timestamptz NOT NULL,
	started_at        timestamptz,
	ready_at          timestamptz,
	heartbeat_at      timestamptz,
	expires_at        timestamptz,
	released_at       timestamptz,
	disposition       text NOT NULL DEFAULT '', -- '' while held, then e.g. released, quarantined, lost
	residue           text NOT NULL DEFAULT '', -- JSON teardown evidence
	PRIMARY KEY (tenant_id, id),
	UNIQUE (tenant_id, computer_id, generation),
	FOREIGN KEY (tenant_id, computer_id) REFERENCES computers (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX leases_open ON leases (provider, host) WHERE released_at IS NULL;

-- A command is one execution with a durable identity. State is one of
-- admitted, dispatched, may_have_started, running, completed, failed,
-- cancelled, timed_out, lost.
CREATE TABLE commands (
	tenant_id        text COLLATE "C" NOT NULL,
	id               text COLLATE "C" NOT NULL,
	computer_id      text COLLATE "C" NOT NULL,
	idempotency_key  text, -- NULL when the caller gave none
	argv             text NOT NULL DEFAULT '', -- JSON array; '' for a script
	script           text NOT NULL DEFAULT '',
	cwd              text NOT NULL DEFAULT '',
	env_names        text NOT NULL DEFAULT '', -- JSON array of names; values are never stored
	timeout_ms       bigint NOT NULL DEFAULT 0,
	tier             text NOT NULL DEFAULT '',
	state            text NOT NULL,
	exit_code        integer,
	lease_id         text COLLATE "C", -- the lease and generation that ran it
	generation       bigint,
	last_seq         bigint NOT NULL DEFAULT 0, -- seq of its newest event
	output_digest    text NOT NULL DEFAULT '',
	cpu_millis       bigint NOT NULL DEFAULT 0, -- usage
	wall_millis      bigint NOT NULL DEFAULT 0,
	max_memory_bytes bigint NOT NULL DEFAULT 0,
	output_bytes     bigint NOT NULL DEFAULT 0,
	created_at       timestamptz NOT NULL,
	dispatched_at    timestamptz,
	started_at       timestamptz,
	finished_at      timestamptz,
	updated_at       timestamptz NOT NULL,
	PRIMARY KEY (tenant_id, id),
	UNIQUE (tenant_id, computer_id, idempotency_key),
	FOREIGN KEY (tenant_id, computer_id) REFERENCES computers (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX commands_computer ON commands (tenant_id, computer_id, created_at, id);
CREATE INDEX commands_state ON commands (state, updated_at);

-- An event is one sequenced record of a command: seq counts 1, 2, 3… per
-- command; kind is stdout, stderr, exit or state; data holds output bytes or
-- JSON fields.
CREATE TABLE events (
	tenant_id  text COLLATE "C" NOT NULL,
	command_id text COLLATE "C" NOT NULL,
	seq        bigint NOT NULL,
	kind       text NOT NULL,
	data       bytea NOT NULL,
	created_at timestamptz NOT NULL,
	PRIMARY KEY (tenant_id, command_id, seq),
	FOREIGN KEY (tenant_id, command_id) REFERENCES commands (tenant_id, id) ON DELETE CASCADE
);

-- A receipt is signed evidence about a command or a lease. It has no foreign
-- key, so it outlives what it describes.
CREATE TABLE receipts (
	tenant_id    text COLLATE "C" NOT NULL,
	id           text COLLATE "C" NOT NULL,
	subject_kind text NOT NULL, -- command or lease
	subject_id   text COLLATE "C" NOT NULL,
	body         bytea NOT NULL, -- the canonical JSON that was signed
	key_id       text NOT NULL DEFAULT '', -- which signing key
	signature    bytea NOT NULL, -- Ed25519 over body
	created_at   timestamptz NOT NULL,
	PRIMARY KEY (tenant_id, id)
);
CREATE INDEX receipts_subject ON receipts (tenant_id, subject_kind, subject_id);

-- Capacity admission. A scope is (scope_kind, scope_id): command, profile,
-- computer, conversation, owner, tenant, provider, region or global. Scopes
-- that belong to no tenant (provider, region, global) use tenant_id ''.
-- capacity holds each scope's limit and running total; admission reserves in
-- one transaction with, per scope,
--   UPDATE capacity SET reserved = reserved + ? WHERE ... AND reserved + ? <= ceiling
-- and rolls back if any scope matches no row.
CREATE TABLE capacity (
	tenant_id  text COLLATE "C" NOT NULL,
	scope_kind text NOT NULL,
	scope_id   text COLLATE "C" NOT NULL,
	resource   text NOT NULL, -- cpu_millis, memory_bytes, scratch_bytes, starts, ...
	ceiling    bigint NOT NULL,
	reserved   bigint NOT NULL DEFAULT 0,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (tenant_id, scope_kind, scope_id, resource)
);

-- reservations is the ledger behind capacity.reserved: what each admission
-- holds in each scope, so that releasing it subtracts exactly that.
CREATE TABLE reservations (
	tenant_id       text COLLATE "C" NOT NULL,
	id              text COLLATE "C" NOT NULL, -- one admission
	scope_tenant_id text COLLATE "C" NOT NULL, -- the capacity row's tenant_id ('' for shared scopes)
	scope_kind      text NOT NULL,
	scope_id        text COLLATE "C" NOT NULL,
	resource        text NOT NULL,
	amount          bigint NOT NULL,
	lease_id        text COLLATE "C",
	created_at      timestamptz NOT NULL,
	expires_at      timestamptz,
	PRIMARY KEY (tenant_id, id, scope_kind, scope_id, resource)
);
CREATE INDEX reservations_scope ON reservations (scope_tenant_id, scope_kind, scope_id, resource);
