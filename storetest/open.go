package storetest

import (
	"path/filepath"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/postgres"
	"github.com/bothyhq/bothy/postgres/pgtest"
	"github.com/bothyhq/bothy/sqlite"
)

// Engine is one implementation of bothy.Store, for tests that run on each.
type Engine struct {
	Name string // a subtest name: "SQLite", "PostgreSQL"
	// Open returns a new, empty store, closed when the test ends.
	Open func(tb testing.TB) bothy.Store
}

// Engines lists every store implementation.
var Engines = []Engine{{"SQLite", OpenSQLite}, {"PostgreSQL", OpenPostgres}}

// Each runs fn as a subtest per engine, on a new, empty store.
func Each(t *testing.T, fn func(t *testing.T, s bothy.Store)) {
	t.Helper()
	for _, e := range Engines {
		t.Run(e.Name, func(t *testing.T) { fn(t, e.Open(t)) })
	}
}

// OpenSQLite returns a new, empty SQLite store in a temporary directory,
// closed when the test ends.
func OpenSQLite(tb testing.TB) bothy.Store {
	tb.Helper()
	s, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "bothy.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// OpenPostgres returns a store on a new, empty PostgreSQL database made by
// pgtest.URL, which ends the test with testenv.Skip when there is no
// server; the store is closed, and the database dropped, when the test
// ends.
func OpenPostgres(tb testing.TB) bothy.Store {
	tb.Helper()
	s, err := postgres.Open(tb.Context(), pgtest.URL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
