package postgres_test

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/postgres"
	"github.com/bothyhq/bothy/postgres/pgtest"
	"github.com/bothyhq/bothy/storetest"
)

func TestStore(t *testing.T) {
	storetest.TestStore(t, func(t *testing.T) bothy.Store { return storetest.OpenPostgres(t) })
}

// TestOpen_Concurrent opens one empty database from several replicas at once:
// the migration lock lets exactly one apply each migration.
func TestOpen_Concurrent(t *testing.T) {
	url := pgtest.URL(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := postgres.Open(t.Context(), url)
			if err == nil {
				err = s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	s, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.SQL().QueryRowContext(t.Context(), "SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	} else if n != len(files) {
		t.Errorf("schema_migrations holds %d rows, want %d (one per migration)", n, len(files))
	}
}
