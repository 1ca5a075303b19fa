package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/hostcache"
	"github.com/bothyhq/bothy/runtime"
)

// owningProvider is a provider that runs each lease as a uid of its own,
// as bwrap and gvisor do.
type owningProvider struct{ bothy.Provider }

func (owningProvider) WorkspaceUID(context.Context, string) (int, error) { return 100000, nil }

// TestLease_WorkspaceCopyRefusesIsolation: an agent in copy mode refuses a
// provider that isolates its sandboxes, whose workspace the copy's plain
// scan would not be safe against, before it writes anything.
func TestLease_WorkspaceCopyRefusesIsolation(t *testing.T) {
	dir := t.TempDir()
	l := &lease{a: &Agent{log: slog.New(slog.DiscardHandler)}, dir: filepath.Join(dir, "lse_1"),
		rec: record{LeaseID: "lse_1", Provider: "bwrap", Workspace: hostcache.ModeCopy}}
	_, err := l.workspace(t.Context(), &runtime.LeaseWork{LeaseID: "lse_1"}, owningProvider{}, nil, false)
	if bothy.ErrorCode(err) != bothy.EINVALID {
		t.Fatalf("copy workspace for an isolating provider: %v, want EINVALID", err)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "*")); len(matches) != 0 {
		t.Errorf("the refusal left %v", matches)
	}
}
