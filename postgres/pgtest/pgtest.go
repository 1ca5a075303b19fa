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
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy/testenv"
	"github.com/jackc/pgx/v5"
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

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A test database need not survive a crash, so commits need not wait
	// for the disk.
	exec(ctx, t, admin, "CREATE DATABASE "+name, "ALTER DATABASE "+name+" SET synchronous_commit = off")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		exec(ctx, t, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := withDatabase(admin, name)
	if err != nil {
		t.Fatalf("pgtest: %s: %v", EnvURL, err)
	}
	return u
}

// exec runs statements one at a time (CREATE DATABASE cannot share a
// transaction) on the admin database.
func exec(ctx context.Context, t testing.TB, admin string, stmts ...string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", EnvURL, err)
	}
	defer conn.Close(ctx)
	for _, stmt := range stmts {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("pgtest: %s: %v", stmt, err)
		}
	}
}

// withDatabase returns the connection string admin with its database
// replaced by name. admin is a postgres:// URL or a keyword/value string.
func withDatabase(admin, name string) (string, error) {
	if !strings.HasPrefix(admin, "postgres://") && !strings.HasPrefix(admin, "postgresql://") {
		return admin + " dbname=" + name, nil
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	u.Path, u.RawPath = "/"+name, ""
	q := u.Query()
	if q.Has("dbname") {
		q.Set("dbname", name)
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}
