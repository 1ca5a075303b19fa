package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bothyhq/bothy/server"
)

// buildSupervisor builds cmd/bothy-supervisor with the build stamp stamp
// ("" for none) and returns its bytes.
func buildSupervisor(t *testing.T, stamp string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "sup")
	args := []string{"build", "-o", out}
	if stamp != "" {
		args = append(args, "-ldflags", "-X "+server.BuildStampFlag+"="+stamp)
	}
	cmd := exec.Command("go", append(args, "github.com/bothyhq/bothy/cmd/bothy-supervisor")...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSupervisorFor runs the supervisor's own program when it is beside
// the binary and was built with it (the same build stamp), and the
// binary's supervisor verb otherwise: a stale program of another build,
// or two builds without a stamp, which module and VCS settings alone
// cannot tell apart.
func TestSupervisorFor(t *testing.T) {
	stamped := buildSupervisor(t, "one")
	other := buildSupervisor(t, "two")
	unstamped := buildSupervisor(t, "")
	setup := func(t *testing.T, exeBytes, sup []byte, mode os.FileMode) string {
		dir := t.TempDir()
		exe := filepath.Join(dir, "bothy")
		if err := os.WriteFile(exe, exeBytes, 0o755); err != nil {
			t.Fatal(err)
		}
		if sup != nil {
			if err := os.WriteFile(filepath.Join(dir, server.SupervisorProgram), sup, mode); err != nil {
				t.Fatal(err)
			}
		}
		return exe
	}
	verb := func(exe string) []string { return []string{exe, "supervisor"} }
	t.Run("OK", func(t *testing.T) {
		exe := setup(t, stamped, stamped, 0o755)
		if got, want := server.SupervisorFor(exe), []string{filepath.Join(filepath.Dir(exe), server.SupervisorProgram)}; !slices.Equal(got, want) {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
	for name, c := range map[string]struct {
		exe, sup []byte
		mode     os.FileMode
	}{
		"Missing":       {stamped, nil, 0},
		"NotExecutable": {stamped, stamped, 0o644},
		"NotGo":         {stamped, []byte("#!/bin/sh\nexit 0\n"), 0o755},
		"OtherStamp":    {stamped, other, 0o755},
		"Unstamped":     {unstamped, unstamped, 0o755},
		"SupUnstamped":  {stamped, unstamped, 0o755},
	} {
		t.Run(name, func(t *testing.T) {
			exe := setup(t, c.exe, c.sup, c.mode)
			if got := server.SupervisorFor(exe); !slices.Equal(got, verb(exe)) {
				t.Fatalf("got %q, want %q", got, verb(exe))
			}
		})
	}
}
