package control_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/runtime"
)

// commandError is the error field of the command's API JSON, "" if none.
func commandError(t *testing.T, c *bothy.Command) string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	s, _ := m["error"].(string)
	return s
}

// TestRestartBeforeDispatch: a command admitted with environment values or
// with stdin, neither of which is stored, fails with the reason when the
// control plane restarts before dispatching it, instead of running without
// them; a command with neither runs.
func TestRestartBeforeDispatch(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		withEnv, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"env"}, Env: map[string]string{"A": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		withStdin, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"cat"}, Stdin: "input"})
		if err != nil {
			t.Fatal(err)
		}
		plain, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}

		// The agent holds the lease, not ready yet; then a new control
		// plane process over the same store, before any dispatch.
		w := f.poll()
		if len(w.Commands) != 0 {
			t.Fatalf("dispatched before ready: %+v", w.Commands)
		}
		held := runtime.HeldLease{LeaseID: w.LeaseID, TenantID: "t1", Generation: w.Generation}
		f.c = control.New(s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken})
		if err := f.c.Reconcile(f.ctx); err != nil {
			t.Fatal(err)
		}
		w = f.poll(held)
		if err := f.c.Ready(f.ctx, w.Credential, &runtime.ReadyRequest{Host: "h"}); err != nil {
			t.Fatal(err)
		}
		w = f.poll(held)
		if len(w.Commands) != 1 || w.Commands[0].CommandID != plain.ID || w.Commands[0].Action != runtime.ActRun {
			t.Fatalf("after restart the runtime is sent %+v, want only %s run", w.Commands, plain.ID)
		}
		for _, x := range []struct {
			cmd  *bothy.Command
			want string
		}{{withEnv, "environment values"}, {withStdin, "stdin"}} {
			got, err := s.FindCommand(f.ctx, "t1", x.cmd.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != bothy.CommandFailed || !strings.Contains(commandError(t, got), x.want) || !strings.Contains(commandError(t, got), "restarted") {
				t.Errorf("command %v after restart: %s, error %q; want failed saying %q was lost at a restart", x.cmd.Argv, got.State, commandError(t, got), x.want)
			}
		}
	})
}

// TestFailedCommandError: a command the runtime could not run (a bad cwd)
// ends failed with the runtime's reason in its error field.
func TestFailedCommandError(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		cmd, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}, Cwd: "missing"})
		if err != nil {
			t.Fatal(err)
		}
		w := f.ready()
		if len(w.Commands) != 1 || w.Commands[0].Action != runtime.ActRun {
			t.Fatalf("dispatch: %+v", w.Commands)
		}
		const reason = `cwd "missing": no such directory`
		if err := f.c.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunFailed, Error: reason}); err != nil {
			t.Fatal(err)
		}
		got, err := s.FindCommand(f.ctx, "t1", cmd.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != bothy.CommandFailed || commandError(t, got) != reason {
			t.Errorf("command: %s, error %q; want failed, %q", got.State, commandError(t, got), reason)
		}
	})
}
