-- Owners inside a tenant: a token acts on its owner's computers only.

-- A token stored without an owner becomes its own owner, so that no two
-- ownerless tokens share computers (bothy.TokenService.CreateToken does
-- the same for new tokens). Computers of older servers keep their owner;
-- an ownerless one is reachable with computers:any (or admin) only.
UPDATE tokens SET owner = id WHERE owner = '';

-- A conversation belongs to the owner of its first computer, and every
-- computer in it to that owner (bothy.ComputerService.CreateComputer).
CREATE TABLE conversations (
	tenant_id  TEXT NOT NULL REFERENCES tenants (id),
	id         TEXT NOT NULL,
	owner      TEXT NOT NULL,
	created_at TEXT NOT NULL,
	PRIMARY KEY (tenant_id, id)
);

-- Existing conversations: their earliest computer's owner.
INSERT INTO conversations (tenant_id, id, owner, created_at)
SELECT c.tenant_id, c.conversation_id, c.owner, c.created_at FROM computers c
WHERE c.conversation_id <> '' AND NOT EXISTS (
	SELECT 1 FROM computers d WHERE d.tenant_id = c.tenant_id AND d.conversation_id = c.conversation_id
	AND (d.created_at < c.created_at OR (d.created_at = c.created_at AND d.id < c.id)));

CREATE INDEX computers_owner ON computers (tenant_id, owner, created_at, id);
