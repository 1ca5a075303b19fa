package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sqlite"
	"github.com/bothyhq/bothy/storetest"
)

func TestStore(t *testing.T) {
	storetest.TestStore(t, func(t *testing.T) bothy.Store { return storetest.OpenSQLite(t) })
}

func TestOpen_Reopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bothy.db")
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTenant(t.Context(), &bothy.Tenant{ID: "acme", HashKey: make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Migrations already applied are skipped, and the data is kept.
	s, err = sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.FindTenant(t.Context(), "acme"); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := s.SQL().QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	} else if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
}

// TestMigrate_Owners reruns migration 0007 on rows of an older server: an
// ownerless token becomes its own owner, and a conversation becomes its
// earliest computer's owner's.
func TestMigrate_Owners(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "bothy.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTenant(ctx, &bothy.Tenant{ID: "acme", HashKey: make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`DROP INDEX computers_owner`, `DROP TABLE conversations`,
		`DELETE FROM schema_migrations WHERE name = '0007_owners.sql'`,
		`INSERT INTO tokens (tenant_id, id, digest, owner, scopes, created_at) VALUES ('acme', 'tok_old', 'd', '', 'admin', '2025-01-01T00:00:00.000000Z')`,
		`INSERT INTO computers (tenant_id, id, owner, conversation_id, profile, state, created_at, updated_at)
			VALUES ('acme', 'c2', 'bob', 'conv', 'standard', 'cold', '2025-01-02T00:00:00.000000Z', '2025-01-02T00:00:00.000000Z'),
			       ('acme', 'c1', 'alice', 'conv', 'standard', 'cold', '2025-01-01T00:00:00.000000Z', '2025-01-01T00:00:00.000000Z')`,
	} {
		if _, err := s.SQL().ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	s.Close()
	if s, err = sqlite.Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var owner string
	if err := s.SQL().QueryRowContext(ctx, `SELECT owner FROM tokens WHERE id = 'tok_old'`).Scan(&owner); err != nil || owner != "tok_old" {
		t.Errorf("ownerless token's owner after migration: %q, %v; want tok_old", owner, err)
	}
	if owner, err := s.ConversationOwner(ctx, "acme", "conv"); err != nil || owner != "alice" {
		t.Errorf("conversation owner after migration: %q, %v; want alice (its earliest computer's)", owner, err)
	}
}
