-- Why a command failed, and whether it had stdin.

-- Why the command failed or was lost (bothy.Command.Error; '' if nothing
-- said why).
ALTER TABLE commands ADD COLUMN error text NOT NULL DEFAULT '';
-- The size of the stdin it was given; the bytes themselves are never
-- stored.
ALTER TABLE commands ADD COLUMN stdin_bytes bigint NOT NULL DEFAULT 0;
