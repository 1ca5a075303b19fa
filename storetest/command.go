package storetest

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bothyhq/bothy"
)

// commandStates lists every command state.
var commandStates = []string{
	bothy.CommandAdmitted, bothy.CommandDispatched, bothy.CommandRunning, bothy.CommandMayHaveStarted,
	bothy.CommandCompleted, bothy.CommandFailed, bothy.CommandCancelled, bothy.CommandTimedOut, bothy.CommandLost,
}

// newCommand returns an argv command with an idempotency key (none if "").
func newCommand(tenantID, computerID, id, key string) *bothy.Command {
	return &bothy.Command{
		ID: id, TenantID: tenantID, ComputerID: computerID, IdempotencyKey: key,
		Argv: []string{"sh", "-c", "echo " + id}, Cwd: "/work", EnvNames: []string{"HOME", "API_TOKEN"}, TimeoutMS: 30000,
	}
}

// mustCreateCommand creates c and fails unless it was created.
func mustCreateCommand(t *testing.T, s bothy.Store, c *bothy.Command) *bothy.Command {
	t.Helper()
	created, err := s.CreateCommand(t.Context(), c)
	if err != nil {
		t.Fatalf("CreateCommand(%s/%s): %v", c.TenantID, c.ID, err)
	} else if !created {
		t.Fatalf("CreateCommand(%s/%s) returned existing command %s", c.TenantID, c.ID, c.ID)
	}
	return c
}

// mustFindCommand returns the stored command.
func mustFindCommand(t *testing.T, s bothy.Store, tenantID, id string) *bothy.Command {
	t.Helper()
	c, err := s.FindCommand(t.Context(), tenantID, id)
	if err != nil {
		t.Fatalf("FindCommand(%s/%s): %v", tenantID, id, err)
	}
	return c
}

// mustTransition moves a command and returns it.
func mustTransition(t *testing.T, s bothy.Store, tenantID, id string, from []string, to string, u bothy.CommandUpdate) *bothy.Command {
	t.Helper()
	c, err := s.TransitionCommand(t.Context(), tenantID, id, from, to, u)
	if err != nil {
		t.Fatalf("TransitionCommand(%s/%s %v → %s): %v", tenantID, id, from, to, err)
	}
	return c
}

// checkCommand fails the test unless got equals want field by field.
func checkCommand(t *testing.T, got, want *bothy.Command) {
	t.Helper()
	g, w := *got, *want
	for _, p := range []struct {
		what string
		g, w *time.Time
	}{
		{"CreatedAt", &g.CreatedAt, &w.CreatedAt}, {"DispatchedAt", &g.DispatchedAt, &w.DispatchedAt},
		{"StartedAt", &g.StartedAt, &w.StartedAt}, {"FinishedAt", &g.FinishedAt, &w.FinishedAt},
	} {
		if p.g.IsZero() != p.w.IsZero() {
			t.Errorf("command %s: %s = %v, want %v", want.ID, p.what, *p.g, *p.w)
		} else if !p.w.IsZero() {
			if d := diffTimes(p.what, *p.g, *p.w); d != "" {
				t.Errorf("command %s: %s", want.ID, d)
			}
		}
		*p.g, *p.w = time.Time{}, time.Time{}
	}
	// A command's wall time is its duration: an expectation built by hand
	// may leave it out.
	if w.Usage.WallMillis == 0 {
		w.Usage.WallMillis = w.DurationMS
	}
	if g.Usage.WallMillis != g.DurationMS {
		t.Errorf("command %s: usage wall_ms %d, duration_ms %d", want.ID, g.Usage.WallMillis, g.DurationMS)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("command = %+v\nwant      %+v", g, w)
	}
}

// journalSetup makes tenant acme with computer c1 holding lease l1 at
// generation 1, and command cmd1 dispatched to it.
func journalSetup(t *testing.T, open opener) (bothy.Store, *bothy.Command) {
	t.Helper()
	s := leaseSetup(t, open)
	mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
	mustCreateCommand(t, s, newCommand("acme", "c1", "cmd1", "k1"))
	c, err := s.DispatchCommand(t.Context(), "acme", "cmd1", "l1", 1)
	if err != nil {
		t.Fatalf("DispatchCommand: %v", err)
	}
	return s, c
}

// moveToGeneration2 releases lease l1 and acquires l2 at generation 2.
func moveToGeneration2(t *testing.T, s bothy.Store) {
	t.Helper()
	if err := s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseLost, ""); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, newLease("acme", "c1", "l2", 2))
}

func testCommands(t *testing.T, open opener) {
	run(t, "CreateCommand/OK", func(t *testing.T) {
		s := leaseSetup(t, open)
		c := newCommand("acme", "c1", "cmd1", "k1")
		mustCreateCommand(t, s, c)
		if c.State != bothy.CommandAdmitted || c.CreatedAt.IsZero() || c.LastSeq != 0 || c.ExitCode != nil || c.LeaseID != "" {
			t.Errorf("CreateCommand filled %+v", c)
		}
		want := newCommand("acme", "c1", "cmd1", "k1")
		want.State, want.CreatedAt = bothy.CommandAdmitted, c.CreatedAt
		checkCommand(t, c, want)
		checkCommand(t, mustFindCommand(t, s, "acme", "cmd1"), want)
	})

	run(t, "TransitionCommand/UsageAndLimits", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandRunning, bothy.CommandUpdate{Generation: 1})
		use := bothy.Usage{CPUMicros: 1500000, PeakMemoryBytes: 64 << 20, MemoryByteSeconds: 3 << 20, BytesWritten: 4096, NetworkBytes: 77}
		code := 137
		got := mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandRunning}, bothy.CommandFailed, bothy.CommandUpdate{
			Generation: 1, ExitCode: &code, DurationMS: 2500, Usage: &use, OOMKilled: true, DiskLimited: true, SandboxLost: true})
		use.WallMillis = 2500
		if got.Usage != use || !got.OOMKilled || got.PidsLimited || !got.DiskLimited || !got.SandboxLost {
			t.Errorf("usage %+v limits %v %v %v sandbox_lost %v, want %+v and oom, disk, sandbox_lost", got.Usage, got.OOMKilled, got.PidsLimited, got.DiskLimited, got.SandboxLost, use)
		}
		checkCommand(t, mustFindCommand(t, s, "acme", "cmd1"), got)

		// The computer's usage is the total of its commands'.
		mustCreateCommand(t, s, newCommand("acme", "c1", "cmd2", "k2"))
		if _, err := s.DispatchCommand(t.Context(), "acme", "cmd2", "l1", 1); err != nil {
			t.Fatal(err)
		}
		mustTransition(t, s, "acme", "cmd2", []string{bothy.CommandDispatched}, bothy.CommandRunning, bothy.CommandUpdate{Generation: 1})
		use2 := bothy.Usage{CPUMicros: 500000, PeakMemoryBytes: 1 << 20, MemoryByteSeconds: 1 << 20, BytesWritten: 4, NetworkBytes: 3}
		mustTransition(t, s, "acme", "cmd2", []string{bothy.CommandRunning}, bothy.CommandCompleted, bothy.CommandUpdate{
			Generation: 1, ExitCode: new(int), DurationMS: 500, Usage: &use2})
		want := use
		use2.WallMillis = 500
		want.Add(use2)
		if c := mustFindComputer(t, s, "acme", "c1"); c.Usage != want {
			t.Errorf("computer usage %+v, want %+v", c.Usage, want)
		}
		if cs, err := s.ListComputers(t.Context(), "acme", bothy.ComputerFilter{}); err != nil || len(cs) != 1 || cs[0].Usage != want {
			t.Errorf("listed computer usage %+v (%v), want %+v", cs, err, want)
		}
	})

	run(t, "TransitionCommand/ErrorAndStdinBytes", func(t *testing.T) {
		s := leaseSetup(t, open)
		c := newCommand("acme", "c1", "cmd1", "")
		c.StdinBytes = 5
		mustCreateCommand(t, s, c)
		if c.StdinBytes != 5 || mustFindCommand(t, s, "acme", "cmd1").StdinBytes != 5 {
			t.Errorf("stdin_bytes %d, want 5", mustFindCommand(t, s, "acme", "cmd1").StdinBytes)
		}
		got := mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandAdmitted}, bothy.CommandFailed, bothy.CommandUpdate{Error: "the reason"})
		if got.Error != "the reason" {
			t.Errorf("error %q, want the reason", got.Error)
		}
		checkCommand(t, mustFindCommand(t, s, "acme", "cmd1"), got)
		// A long reason is cut, at a rune boundary.
		mustCreateCommand(t, s, newCommand("acme", "c1", "cmd2", ""))
		long := "x" + strings.Repeat("é", bothy.MaxCommandErrorLen)
		got = mustTransition(t, s, "acme", "cmd2", []string{bothy.CommandAdmitted}, bothy.CommandFailed, bothy.CommandUpdate{Error: long})
		if len(got.Error) > bothy.MaxCommandErrorLen || len(got.Error) < bothy.MaxCommandErrorLen-1 || !strings.HasPrefix(long, got.Error) || !utf8.ValidString(got.Error) {
			t.Errorf("a long error is stored as %d bytes", len(got.Error))
		}
		bad := newCommand("acme", "c1", "cmd3", "")
		bad.StdinBytes = -1
		_, err := s.CreateCommand(t.Context(), bad)
		WantCode(t, err, bothy.EINVALID)
	})

	run(t, "CreateCommand/SecretRefs", func(t *testing.T) {
		s := leaseSetup(t, open)
		c := newCommand("acme", "c1", "cmd1", "")
		c.Secrets = []bothy.SecretRef{{Name: "gh-token", Env: "GH_TOKEN"}, {Name: "npm"}}
		c.AuthorityDigest = "abc"
		c.Limits = bothy.Limits{MemoryBytes: 64 << 20, Pids: 32}
		mustCreateCommand(t, s, c)
		got := mustFindCommand(t, s, "acme", "cmd1")
		want := []bothy.SecretRef{{Name: "gh-token", Env: "GH_TOKEN"}, {Name: "npm", Env: "NPM"}}
		if !reflect.DeepEqual(got.Secrets, want) || got.AuthorityDigest != "abc" || got.Limits != c.Limits {
			t.Errorf("secrets %+v digest %q, want %+v", got.Secrets, got.AuthorityDigest, want)
		}
		bad := newCommand("acme", "c1", "cmd2", "")
		bad.Secrets = []bothy.SecretRef{{Name: "a", Env: "X"}, {Name: "b", Env: "X"}}
		_, err := s.CreateCommand(t.Context(), bad)
		WantCode(t, err, bothy.EINVALID)
	})

	run(t, "CreateCommand/Script", func(t *testing.T) {
		s := leaseSetup(t, open)
		// Commands without a key never collide.
		for _, id := range []string{"a", "b"} {
			c := &bothy.Command{ID: id, TenantID: "acme", ComputerID: "c1", Script: "echo hi | tr a-z A-Z"}
			mustCreateCommand(t, s, c)
			got := mustFindCommand(t, s, "acme", id)
			checkCommand(t, got, c)
			if got.Argv != nil || got.EnvNames != nil || got.IdempotencyKey != "" {
				t.Errorf("script command read back argv %q env %q key %q", got.Argv, got.EnvNames, got.IdempotencyKey)
			}
		}
	})

	run(t, "CreateCommand/Idempotent", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c2"})
		first := mustCreateCommand(t, s, newCommand("acme", "c1", "cmd1", "k1"))
		again := newCommand("acme", "c1", "cmd2", "k1")
		again.Argv = []string{"rm", "-rf", "/"}
		created, err := s.CreateCommand(t.Context(), again)
		if err != nil {
			t.Fatal(err)
		} else if created {
			t.Fatal("the same idempotency key created a second command")
		}
		checkCommand(t, again, first)
		_, err = s.FindCommand(t.Context(), "acme", "cmd2")
		WantCode(t, err, bothy.ENOTFOUND)
		// A key is unique per computer, not per tenant.
		mustCreateCommand(t, s, newCommand("acme", "c2", "cmd3", "k1"))
	})

	run(t, "CreateCommand/ConcurrentKey", func(t *testing.T) {
		s := leaseSetup(t, open)
		const n = 16
		cmds := make([]*bothy.Command, n)
		created := make([]bool, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				cmds[i] = newCommand("acme", "c1", fmt.Sprintf("cmd%02d", i), "same-key")
				created[i], errs[i] = s.CreateCommand(t.Context(), cmds[i])
			})
		}
		wg.Wait()
		winner := ""
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("caller %d: %v", i, errs[i])
			}
			if created[i] {
				if winner != "" {
					t.Errorf("commands %s and %s were both created", winner, cmds[i].ID)
				}
				winner = cmds[i].ID
			}
		}
		if winner == "" {
			t.Fatal("no caller created the command")
		}
		for i := range n {
			if cmds[i].ID != winner {
				t.Errorf("caller %d got command %s, want %s", i, cmds[i].ID, winner)
			}
		}
		if cs, err := s.ListCommands(t.Context(), "acme", bothy.CommandFilter{}); err != nil {
			t.Fatal(err)
		} else if len(cs) != 1 {
			t.Errorf("%d commands stored, want 1", len(cs))
		}
	})

	run(t, "CreateCommand/ErrConflict", func(t *testing.T) {
		s := leaseSetup(t, open)
		first := mustCreateCommand(t, s, newCommand("acme", "c1", "cmd1", "k1"))
		_, err := s.CreateCommand(t.Context(), newCommand("acme", "c1", "cmd1", "k2"))
		WantCode(t, err, bothy.ECONFLICT)
		_, err = s.CreateCommand(t.Context(), newCommand("acme", "c1", "cmd1", ""))
		WantCode(t, err, bothy.ECONFLICT)
		checkCommand(t, mustFindCommand(t, s, "acme", "cmd1"), first)
		if err := s.SetComputerState(t.Context(), "acme", "c1", bothy.StateDestroyed); err != nil {
			t.Fatal(err)
		}
		_, err = s.CreateCommand(t.Context(), newCommand("acme", "c1", "cmd2", "k2"))
		WantCode(t, err, bothy.ECONFLICT)
	})

	run(t, "CreateCommand/ErrNotFound", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateTenant(t, s, "other")
		_, err := s.CreateCommand(t.Context(), newCommand("acme", "nope", "cmd1", ""))
		WantCode(t, err, bothy.ENOTFOUND)
		_, err = s.CreateCommand(t.Context(), newCommand("other", "c1", "cmd1", ""))
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "CreateCommand/ErrInvalid", func(t *testing.T) {
		s := leaseSetup(t, open)
		for name, mod := range map[string]func(c *bothy.Command){
			"neither argv nor script": func(c *bothy.Command) { c.Argv = nil },
			"both argv and script":    func(c *bothy.Command) { c.Script = "true" },
			"env value":               func(c *bothy.Command) { c.EnvNames = []string{"TOKEN=secret"} },
			"not admitted":            func(c *bothy.Command) { c.State = bothy.CommandRunning },
			"negative timeout":        func(c *bothy.Command) { c.TimeoutMS = -1 },
			"long key":                func(c *bothy.Command) { c.IdempotencyKey = strings.Repeat("k", 257) },
			"bad id":                  func(c *bothy.Command) { c.ID = "a/b" },
		} {
			c := newCommand("acme", "c1", "cmd1", "k1")
			mod(c)
			if _, err := s.CreateCommand(t.Context(), c); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("%s: error %v, want code %q", name, err, bothy.EINVALID)
			}
		}
	})

	run(t, "FindCommand/ErrNotFound", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateTenant(t, s, "other")
		mustCreateCommand(t, s, newCommand("acme", "c1", "cmd1", ""))
		_, err := s.FindCommand(t.Context(), "acme", "nope")
		WantCode(t, err, bothy.ENOTFOUND)
		_, err = s.FindCommand(t.Context(), "other", "cmd1")
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "ListCommands/Filter", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c2"})
		mustCreateTenant(t, s, "other")
		mustCreateComputer(t, s, "other", &bothy.Computer{ID: "c1"})
		mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
		for i, x := range []struct{ computer, id string }{{"c1", "b"}, {"c2", "a"}, {"c1", "c"}, {"c1", "d"}} {
			c := newCommand("acme", x.computer, x.id, "")
			c.CreatedAt = t0.Add(time.Duration(i) * time.Second)
			mustCreateCommand(t, s, c)
		}
		mustCreateCommand(t, s, newCommand("other", "c1", "z", ""))
		if _, err := s.DispatchCommand(t.Context(), "acme", "c", "l1", 1); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			name string
			f    bothy.CommandFilter
			want []string
		}{
			{"all", bothy.CommandFilter{}, []string{"b", "a", "c", "d"}},
			{"computer", bothy.CommandFilter{ComputerID: "c1"}, []string{"b", "c", "d"}},
			{"state", bothy.CommandFilter{State: bothy.CommandAdmitted}, []string{"b", "a", "d"}},
			{"both", bothy.CommandFilter{ComputerID: "c1", State: bothy.CommandDispatched}, []string{"c"}},
			{"lease", bothy.CommandFilter{ComputerID: "c1", LeaseID: "l1"}, []string{"c"}},
			{"page", bothy.CommandFilter{Offset: 1, Limit: 2}, []string{"a", "c"}},
		} {
			cs, err := s.ListCommands(t.Context(), "acme", tt.f)
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, c := range cs {
				got = append(got, c.ID)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s: ListCommands = %q, want %q", tt.name, got, tt.want)
			}
		}
		_, err := s.ListCommands(t.Context(), "acme", bothy.CommandFilter{Limit: -1})
		WantCode(t, err, bothy.EINVALID)
	})

	run(t, "DispatchCommand/OK", func(t *testing.T) {
		s, c := journalSetup(t, open)
		if c.State != bothy.CommandDispatched || c.LeaseID != "l1" || c.Generation != 1 || c.DispatchedAt.IsZero() {
			t.Errorf("dispatched command = %+v", c)
		}
		checkCommand(t, mustFindCommand(t, s, "acme", "cmd1"), c)
	})

	run(t, "DispatchCommand/AtMostOnce", func(t *testing.T) {
		s, c := journalSetup(t, open)
		_, err := s.DispatchCommand(t.Context(), "acme", "cmd1", "l1", 1)
		WantCode(t, err, bothy.ECONFLICT)
		// Not after a break either: may_have_started is never dispatched.
		mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandMayHaveStarted, bothy.CommandUpdate{})
		_, err = s.DispatchCommand(t.Context(), "acme", "cmd1", "l1", 1)
		WantCode(t, err, bothy.ECONFLICT)
		// Nor to a new generation.
		moveToGeneration2(t, s)
		_, err = s.DispatchCommand(t.Context(), "acme", "cmd1", "l2", 2)
		WantCode(t, err, bothy.ECONFLICT)
		if got := mustFindCommand(t, s, "acme", "cmd1"); got.LeaseID != c.LeaseID || got.Generation != 1 {
			t.Errorf("a refused dispatch moved the command to %s at %d", got.LeaseID, got.Generation)
		}
	})

	run(t, "DispatchCommand/Concurrent", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		mustCreateCommand(t, s, newCommand("acme", "c1", "cmd1", ""))
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { _, errs[i] = s.DispatchCommand(t.Context(), "acme", "cmd1", "l1", 1) })
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch bothy.ErrorCode(err) {
			case "":
				won++
			case bothy.ECONFLICT:
			default:
				t.Errorf("dispatcher %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Errorf("%d dispatchers won, want exactly 1", won)
		}
	})

	run(t, "DispatchCommand/ErrStaleLease", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c2"})
		mustCreateTenant(t, s, "other")
		mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		mustAcquire(t, s, newLease("acme", "c2", "l2", 1))
		c := mustCreateCommand(t, s, newCommand("acme", "c1", "cmd1", ""))
		_, err := s.DispatchCommand(t.Context(), "acme", "cmd1", "l1", 2)
		WantCode(t, err, bothy.ECONFLICT)
		_, err = s.DispatchCommand(t.Context(), "acme", "cmd1", "l2", 1) // another computer's lease
		WantCode(t, err, bothy.ECONFLICT)
		_, err = s.DispatchCommand(t.Context(), "acme", "cmd1", "nope", 1)
		WantCode(t, err, bothy.ENOTFOUND)
		_, err = s.DispatchCommand(t.Context(), "acme", "nope", "l1", 1)
		WantCode(t, err, bothy.ENOTFOUND)
		_, err = s.DispatchCommand(t.Context(), "other", "cmd1", "l1", 1)
		WantCode(t, err, bothy.ENOTFOUND)
		if err := s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseReleased, ""); err != nil {
			t.Fatal(err)
		}
		_, err = s.DispatchCommand(t.Context(), "acme", "cmd1", "l1", 1)
		WantCode(t, err, bothy.ECONFLICT)
		checkCommand(t, mustFindCommand(t, s, "acme", "cmd1"), c)
	})

	run(t, "TransitionCommand/Lifecycle", func(t *testing.T) {
		s, c := journalSetup(t, open)
		running := mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandRunning, bothy.CommandUpdate{Generation: 1})
		if running.State != bothy.CommandRunning || running.StartedAt.IsZero() {
			t.Errorf("running command = %+v", running)
		}
		code := 3
		done := mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandRunning}, bothy.CommandCompleted, bothy.CommandUpdate{
			Generation: 1, ExitCode: &code, OutputDigest: "blake3:out", DurationMS: 1234, RevisionAfter: 7,
		})
		want := *c
		want.State, want.ExitCode, want.OutputDigest, want.DurationMS, want.RevisionAfter = bothy.CommandCompleted, &code, "blake3:out", 1234, 7
		want.StartedAt, want.FinishedAt = running.StartedAt, done.FinishedAt
		if done.FinishedAt.IsZero() || done.FinishedAt.Before(running.StartedAt) {
			t.Errorf("FinishedAt = %v, started %v", done.FinishedAt, running.StartedAt)
		}
		checkCommand(t, done, &want)
		checkCommand(t, mustFindCommand(t, s, "acme", "cmd1"), &want)
		// Terminal states never change.
		for _, to := range commandStates {
			_, err := s.TransitionCommand(t.Context(), "acme", "cmd1", []string{bothy.CommandCompleted}, to, bothy.CommandUpdate{Generation: 1})
			WantCode(t, err, bothy.EINVALID)
		}
		_, err := s.TransitionCommand(t.Context(), "acme", "cmd1", []string{bothy.CommandRunning}, bothy.CommandLost, bothy.CommandUpdate{})
		WantCode(t, err, bothy.ECONFLICT)
	})

	run(t, "TransitionCommand/Signal", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandRunning, bothy.CommandUpdate{Generation: 1})
		c := mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandRunning}, bothy.CommandTimedOut, bothy.CommandUpdate{Generation: 1, Signal: "SIGKILL"})
		if c.State != bothy.CommandTimedOut || c.Signal != "SIGKILL" || c.ExitCode != nil {
			t.Errorf("timed out command = %+v", c)
		}
	})

	run(t, "TransitionCommand/Table", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCreateCommand(t, s, newCommand("acme", "c1", "cmd1", ""))
		allowed := map[[2]string]bool{}
		for from, tos := range map[string][]string{
			bothy.CommandAdmitted:       {bothy.CommandCancelled, bothy.CommandFailed},
			bothy.CommandDispatched:     {bothy.CommandRunning, bothy.CommandMayHaveStarted, bothy.CommandFailed},
			bothy.CommandRunning:        {bothy.CommandCompleted, bothy.CommandFailed, bothy.CommandCancelled, bothy.CommandTimedOut, bothy.CommandLost},
			bothy.CommandMayHaveStarted: {bothy.CommandRunning, bothy.CommandLost, bothy.CommandAdmitted},
		} {
			for _, to := range tos {
				allowed[[2]string{from, to}] = true
			}
		}
		for _, from := range commandStates {
			for _, to := range append(commandStates, "sleeping") {
				if got := bothy.CanTransition(from, to); got != allowed[[2]string{from, to}] {
					t.Errorf("CanTransition(%s, %s) = %v", from, to, got)
				}
				if allowed[[2]string{from, to}] {
					continue
				}
				_, err := s.TransitionCommand(t.Context(), "acme", "cmd1", []string{from}, to, bothy.CommandUpdate{Generation: 1})
				if bothy.ErrorCode(err) != bothy.EINVALID {
					t.Errorf("%s → %s: error %v, want code %q", from, to, err, bothy.EINVALID)
				}
			}
		}
		// One disallowed state among the from list refuses the whole call.
		_, err := s.TransitionCommand(t.Context(), "acme", "cmd1", []string{bothy.CommandAdmitted, bothy.CommandCompleted}, bothy.CommandCancelled, bothy.CommandUpdate{})
		WantCode(t, err, bothy.EINVALID)
		_, err = s.TransitionCommand(t.Context(), "acme", "cmd1", nil, bothy.CommandCancelled, bothy.CommandUpdate{})
		WantCode(t, err, bothy.EINVALID)
		if got := mustFindCommand(t, s, "acme", "cmd1"); got.State != bothy.CommandAdmitted {
			t.Errorf("refused transitions left state %q", got.State)
		}
		mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandAdmitted, bothy.CommandRunning}, bothy.CommandCancelled, bothy.CommandUpdate{})
	})

	run(t, "TransitionCommand/ErrRuntimeOnly", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		_, err := s.TransitionCommand(t.Context(), "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandRunning, bothy.CommandUpdate{})
		WantCode(t, err, bothy.EINVALID)
		mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandMayHaveStarted, bothy.CommandUpdate{})
		_, err = s.TransitionCommand(t.Context(), "acme", "cmd1", []string{bothy.CommandMayHaveStarted}, bothy.CommandAdmitted, bothy.CommandUpdate{})
		WantCode(t, err, bothy.EINVALID)
	})

	run(t, "TransitionCommand/ErrStaleGeneration", func(t *testing.T) {
		s, c := journalSetup(t, open)
		_, err := s.TransitionCommand(t.Context(), "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandRunning, bothy.CommandUpdate{Generation: 2})
		WantCode(t, err, bothy.ECONFLICT)
		mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandRunning, bothy.CommandUpdate{Generation: 1})
		c = mustFindCommand(t, s, "acme", "cmd1")
		// Released: its runtime can no longer finish the command, though the
		// computer is still at generation 1.
		if err := s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseLost, ""); err != nil {
			t.Fatal(err)
		}
		_, err = s.TransitionCommand(t.Context(), "acme", "cmd1", []string{bothy.CommandRunning}, bothy.CommandCompleted, bothy.CommandUpdate{Generation: 1})
		WantCode(t, err, bothy.ECONFLICT)
		mustAcquire(t, s, newLease("acme", "c1", "l2", 2))
		for _, gen := range []int64{1, 2} {
			_, err = s.TransitionCommand(t.Context(), "acme", "cmd1", []string{bothy.CommandRunning}, bothy.CommandCompleted, bothy.CommandUpdate{Generation: gen})
			WantCode(t, err, bothy.ECONFLICT)
		}
		checkCommand(t, mustFindCommand(t, s, "acme", "cmd1"), c)
		// The control plane decides without a generation.
		lost := mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandRunning}, bothy.CommandLost, bothy.CommandUpdate{})
		if lost.State != bothy.CommandLost || lost.FinishedAt.IsZero() {
			t.Errorf("lost command = %+v", lost)
		}
	})

	run(t, "TransitionCommand/NeverSeen", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandMayHaveStarted, bothy.CommandUpdate{})
		// Only the generation it was dispatched to may say it never saw it.
		_, err := s.TransitionCommand(t.Context(), "acme", "cmd1", []string{bothy.CommandMayHaveStarted}, bothy.CommandAdmitted, bothy.CommandUpdate{Generation: 2})
		WantCode(t, err, bothy.ECONFLICT)
		c := mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandMayHaveStarted}, bothy.CommandAdmitted, bothy.CommandUpdate{Generation: 1})
		if c.State != bothy.CommandAdmitted || c.LeaseID != "" || c.Generation != 0 || !c.DispatchedAt.IsZero() {
			t.Errorf("re-admitted command = %+v", c)
		}
		// It did not start, so it may be dispatched once more, and only once.
		moveToGeneration2(t, s)
		if _, err := s.DispatchCommand(t.Context(), "acme", "cmd1", "l2", 2); err != nil {
			t.Fatal(err)
		}
		_, err = s.DispatchCommand(t.Context(), "acme", "cmd1", "l2", 2)
		WantCode(t, err, bothy.ECONFLICT)
	})

	run(t, "TransitionCommand/ConcurrentFinish", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandRunning, bothy.CommandUpdate{Generation: 1})
		tos := []string{bothy.CommandCompleted, bothy.CommandCancelled, bothy.CommandTimedOut, bothy.CommandLost, bothy.CommandFailed, bothy.CommandCompleted}
		errs := make([]error, len(tos))
		var wg sync.WaitGroup
		for i, to := range tos {
			wg.Go(func() {
				_, errs[i] = s.TransitionCommand(t.Context(), "acme", "cmd1", []string{bothy.CommandRunning}, to, bothy.CommandUpdate{Generation: 1})
			})
		}
		wg.Wait()
		won := ""
		for i, err := range errs {
			switch bothy.ErrorCode(err) {
			case "":
				if won != "" {
					t.Errorf("both %s and %s won", won, tos[i])
				}
				won = tos[i]
			case bothy.ECONFLICT:
			default:
				t.Errorf("%s: %v", tos[i], err)
			}
		}
		if got := mustFindCommand(t, s, "acme", "cmd1"); got.State != won {
			t.Errorf("state %q, want the winner %q", got.State, won)
		}
	})

	run(t, "TransitionCommand/ErrNotFound", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustCreateTenant(t, s, "other")
		_, err := s.TransitionCommand(t.Context(), "acme", "nope", []string{bothy.CommandAdmitted}, bothy.CommandCancelled, bothy.CommandUpdate{})
		WantCode(t, err, bothy.ENOTFOUND)
		_, err = s.TransitionCommand(t.Context(), "other", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandFailed, bothy.CommandUpdate{})
		WantCode(t, err, bothy.ENOTFOUND)
	})
}
