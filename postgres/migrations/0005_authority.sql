-- The security boundary: egress policy and authority snapshots, usage and
-- limits per command.

-- The computer's egress policy (JSON bothy.EgressPolicy; '' is none) and
-- the authority of its creator (JSON bothy.Authority), snapshotted when it
-- was created.
ALTER TABLE computers ADD COLUMN egress text NOT NULL DEFAULT '';
ALTER TABLE computers ADD COLUMN authority text NOT NULL DEFAULT '';
-- The total usage of the computer's commands, added to by each command
-- that ends (bothy.Usage; peak memory is the largest).
ALTER TABLE computers ADD COLUMN used_cpu_us bigint NOT NULL DEFAULT 0;
ALTER TABLE computers ADD COLUMN used_peak_memory_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE computers ADD COLUMN used_memory_byte_seconds bigint NOT NULL DEFAULT 0;
ALTER TABLE computers ADD COLUMN used_bytes_written bigint NOT NULL DEFAULT 0;
ALTER TABLE computers ADD COLUMN used_network_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE computers ADD COLUMN used_wall_millis bigint NOT NULL DEFAULT 0;
-- The digest of the authority a command was admitted under.
ALTER TABLE commands ADD COLUMN authority_digest text NOT NULL DEFAULT '';
-- The secrets a command asked for (JSON [bothy.SecretRef]): names only,
-- never values.
ALTER TABLE commands ADD COLUMN secrets text NOT NULL DEFAULT '';
-- The command's own limits (JSON bothy.Limits; '' is none).
ALTER TABLE commands ADD COLUMN limits text NOT NULL DEFAULT '';
-- What the command consumed (bothy.Usage; wall time is wall_millis).
ALTER TABLE commands ADD COLUMN cpu_us bigint NOT NULL DEFAULT 0;
ALTER TABLE commands ADD COLUMN peak_memory_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE commands ADD COLUMN memory_byte_seconds bigint NOT NULL DEFAULT 0;
ALTER TABLE commands ADD COLUMN bytes_written bigint NOT NULL DEFAULT 0;
ALTER TABLE commands ADD COLUMN network_bytes bigint NOT NULL DEFAULT 0;
-- The limits the command hit: a comma-separated list of oom_killed,
-- pids_limited and disk_limited.
ALTER TABLE commands ADD COLUMN limited text NOT NULL DEFAULT '';
