package server_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bothyhq/bothy/server"
)

// TestSupervisorFor runs the supervisor's own program when it is beside
// the binary and of the same build, and the binary's supervisor verb
// otherwise.
func TestSupervisorFor(t *testing.T) {
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	setup := func(t *testing.T, sup []byte, mode os.FileMode) string {
		dir := t.TempDir()
		exe := filepath.Join(dir, "bothy")
		if err := os.WriteFile(exe, self, 0o755); err != nil {
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
		exe := setup(t, self, 0o755)
		if got, want := server.SupervisorFor(exe), []string{filepath.Join(filepath.Dir(exe), server.SupervisorProgram)}; !slices.Equal(got, want) {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
	for name, c := range map[string]struct {
		sup  []byte
		mode os.FileMode
	}{
		"Missing":       {nil, 0},
		"NotExecutable": {self, 0o644},
		"OtherBuild":    {[]byte("#!/bin/sh\nexit 0\n"), 0o755},
	} {
		t.Run(name, func(t *testing.T) {
			exe := setup(t, c.sup, c.mode)
			if got := server.SupervisorFor(exe); !slices.Equal(got, verb(exe)) {
				t.Fatalf("got %q, want %q", got, verb(exe))
			}
		})
	}
}
