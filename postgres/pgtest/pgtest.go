// Package pgtest gives tests a fresh, empty PostgreSQL database on the server
// named by the environment variable BOTHY_TEST_POSTGRES_URL, for example
//
//	BOTHY_TEST_POSTGRES_URL='postgres://postgres:pw@127.0.0.1:5432/postgres?sslmode=disable'
//
// (scripts/pg-test-env prints a working value). Without it, tests end with
// testenv.Skip: they skip, unless BOTHY_TEST_REQUIRE_ALL=1, which turns the
// skip into a failure so that CI cannot pass with the PostgreSQL suite
// silently skipped.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/bothyhq/bothy/postgres"
	"github.com/bothyhq/bothy/testenv"
)

// EnvURL names the server URL creates databases on.
const EnvURL = testenv.EnvPostgresURL

// URL creates a database named bothy_test_<random> on the server of
// BOTHY_TEST_POSTGRES_URL, which must name a role allowed to create
// databases, and returns a URL for it. The database is dropped when the test
// ends, even if connections to it are still open. If the variable is unset,
// URL ends the test with testenv.Skip.
func URL(t testing.TB) string {
	t.Helper()
	admin := testenv.PostgresURL(t)
	var b [8]byte
	rand.Read(b[:])
	name := "bothy_test_" + hex.EncodeToString(b[:])
	// A test database need not survive a crash, so commits need not wait
	// for the disk.
	u, err := postgres.CreateDatabase(context.Background(), admin, name, "synchronous_commit = off")
	if err != nil {
		t.Fatalf("pgtest: %s: %v", EnvURL, err)
	}
	t.Cleanup(func() {
		if err := postgres.DropDatabase(context.Background(), admin, name); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	})
	return u
}
