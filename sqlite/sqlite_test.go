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
