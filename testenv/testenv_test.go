package testenv_test

import (
	"fmt"
	"testing"

	"github.com/bothyhq/bothy/testenv"
)

// recorder is a testing.TB that records how a test ended instead of
// ending it.
type recorder struct {
	testing.TB
	ended string // "fatal: msg" or "skip: msg", the first end only
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.end("fatal: " + fmt.Sprintf(format, args...))
}
func (r *recorder) Skip(args ...any) { r.end("skip: " + fmt.Sprint(args...)) }
func (r *recorder) Skipf(format string, args ...any) {
	r.end("skip: " + fmt.Sprintf(format, args...))
}
func (r *recorder) end(s string) {
	if r.ended == "" {
		r.ended = s
	}
}

func TestSkip(t *testing.T) {
	t.Run("Skips", func(t *testing.T) {
		t.Setenv(testenv.EnvRequireAll, "")
		r := &recorder{TB: t}
		testenv.Skip(r, "no %s", "perl")
		if r.ended != "skip: no perl" {
			t.Errorf("ended %q, want a skip", r.ended)
		}
	})
	t.Run("FailsUnderRequireAll", func(t *testing.T) {
		t.Setenv(testenv.EnvRequireAll, "1")
		r := &recorder{TB: t}
		testenv.Skip(r, "no %s", "perl")
		if want := "fatal: no perl (BOTHY_TEST_REQUIRE_ALL=1, so this fails instead of skipping)"; r.ended != want {
			t.Errorf("ended %q, want %q", r.ended, want)
		}
	})
	t.Run("NotApplicableSkipsUnderRequireAll", func(t *testing.T) {
		t.Setenv(testenv.EnvRequireAll, "1")
		r := &recorder{TB: t}
		testenv.NotApplicable(r, "x32 is an x86_64 ABI")
		if r.ended != "skip: x32 is an x86_64 ABI" {
			t.Errorf("ended %q, want a skip", r.ended)
		}
	})
	t.Run("PostgresURL", func(t *testing.T) {
		t.Setenv(testenv.EnvRequireAll, "1")
		t.Setenv(testenv.EnvPostgresURL, "")
		r := &recorder{TB: t}
		testenv.PostgresURL(r)
		if r.ended == "" || r.ended[:6] != "fatal:" {
			t.Errorf("ended %q, want a failure", r.ended)
		}
	})
}
