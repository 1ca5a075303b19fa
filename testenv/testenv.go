// Package testenv decides what a test does when something it needs is
// missing on this host: root, a program, a PostgreSQL server, a sandbox.
// Everywhere but CI it skips; under BOTHY_TEST_REQUIRE_ALL=1 (scripts/test
// sets it) it fails, because a suite skipped in CI is a hole that passes.
//
// Every test that skips goes through this package; TestNoBareSkip keeps it
// so. The two skips that are not for a missing dependency have their own
// names: Short for -short, NotApplicable for a test that means nothing on
// this host (another architecture).
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Environment variables read by this package.
const (
	// EnvRequireAll, set to 1, turns every Skip into a failure.
	EnvRequireAll = "BOTHY_TEST_REQUIRE_ALL"
	// EnvPostgresURL names the PostgreSQL server of the store tests
	// (scripts/pg-test-env prints a working value).
	EnvPostgresURL = "BOTHY_TEST_POSTGRES_URL"
)

// RequireAll reports whether BOTHY_TEST_REQUIRE_ALL=1, so that a test
// that cannot run here must fail rather than skip.
func RequireAll() bool { return os.Getenv(EnvRequireAll) == "1" }

// Skip ends a test that cannot run because something it needs is missing
// on this host: it fails under BOTHY_TEST_REQUIRE_ALL=1 and skips
// otherwise. The message says what is missing.
func Skip(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if RequireAll() {
		tb.Fatalf("%s (%s=1, so this fails instead of skipping)", msg, EnvRequireAll)
	}
	tb.Skip(msg)
}

// Root ends the test with Skip unless it runs as root; reason says what
// needs root.
func Root(tb testing.TB, reason string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Skip(tb, "%s", reason)
	}
}

// Program returns the path of the program name, or ends the test with
// Skip when it is not installed.
func Program(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		Skip(tb, "no %s program: %v", name, err)
	}
	return path
}

// PostgresURL returns $BOTHY_TEST_POSTGRES_URL, the server the store tests
// create their databases on, or ends the test with Skip when it is unset.
// Tests want a database of their own: postgres/pgtest.URL makes one.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvPostgresURL)
	if u == "" {
		Skip(tb, "%s is unset; run `eval \"$(scripts/pg-test-env)\"` first", EnvPostgresURL)
	}
	return u
}

// Short skips the test under `go test -short`, which asks for it, so it
// never fails; reason says what the test does that is slow.
func Short(tb testing.TB, reason string) {
	tb.Helper()
	if testing.Short() {
		tb.Skip(reason)
	}
}

// NotApplicable skips a test that means nothing on this host, such as one
// of another architecture's ABI; it never fails. It is not for a missing
// dependency: that is Skip.
func NotApplicable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Skipf(format, args...)
}
