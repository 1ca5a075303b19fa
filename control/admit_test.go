package control_test

import (
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/control"
)

// TestRunCommand_Admission: the controller admits a run only within the
// caller's authority and the computer's budget (bothy.AdmitRun), and
// within the server's limits for a command's own limits.
func TestRunCommand_Admission(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		comp := &bothy.Computer{ID: "cmp9", TenantID: "t1", Owner: "o", Profile: "standard", State: bothy.StateCold,
			Egress:    bothy.EgressPolicy{Mode: bothy.EgressAllowlist, Allow: []string{"origin.test:443"}},
			Authority: &bothy.Authority{Profiles: []string{"standard"}, Egress: bothy.EgressAllowlist, Budget: bothy.Budget{WallSeconds: 5, CPUSeconds: 1}}}
		if err := s.CreateComputer(f.ctx, comp); err != nil {
			t.Fatal(err)
		}
		auth := func(scopes ...string) *bothy.Authority {
			a := (&bothy.Principal{TenantID: "t1", Scopes: scopes}).Authority()
			return &a
		}
		for name, a := range map[string]*bothy.Authority{
			"other profile only": auth("profile:strong", "egress:all"),
			"egress below":       auth("computers:write"),
		} {
			if _, _, err := f.c.RunCommand(f.ctx, "t1", "cmp9", bothy.RunRequest{Argv: []string{"true"}, Authority: a}); code(err) != bothy.EFORBIDDEN {
				t.Errorf("%s: %v, want forbidden", name, err)
			}
		}
		ok := auth("egress:allowlist")
		cmd, _, err := f.c.RunCommand(f.ctx, "t1", "cmp9", bothy.RunRequest{Argv: []string{"true"}, Authority: ok, TimeoutMS: 60000})
		if err != nil {
			t.Fatal(err)
		} else if cmd.TimeoutMS != 5000 || cmd.AuthorityDigest != ok.Digest() {
			t.Errorf("timeout %d digest %q, want the wall budget's 5000 and the caller's digest", cmd.TimeoutMS, cmd.AuthorityDigest)
		}
		// A command's own limits may not pass the lease's.
		limited := control.New(s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken,
			Limits: bothy.Limits{MemoryBytes: 1 << 30, CPUMillis: 1000, Pids: 100}})
		for _, l := range []bothy.Limits{{MemoryBytes: 2 << 30}, {CPUMillis: 2000}, {Pids: 101}} {
			if _, _, err := limited.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}, Limits: l}); code(err) != bothy.EINVALID {
				t.Errorf("command limits %+v above the lease's: %v, want invalid", l, err)
			}
		}
		if _, _, err := limited.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}, Limits: bothy.Limits{CPUMillis: 500, MemoryBytes: 64 << 20}}); err != nil {
			t.Errorf("command limits within the lease's: %v", err)
		}
	})
}

// TestRunCommand_DefaultTimeout: a run without timeout_ms gets the
// server's command timeout, which a run's own timeout and the wall budget
// replace.
func TestRunCommand_DefaultTimeout(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		c := control.New(s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken, CommandTimeout: time.Hour})
		comp := &bothy.Computer{ID: "cmp9", TenantID: "t1", Owner: "o", Profile: "standard", State: bothy.StateCold,
			Authority: &bothy.Authority{Profiles: []string{"standard"}, Budget: bothy.Budget{WallSeconds: 5}}}
		if err := s.CreateComputer(f.ctx, comp); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			computer string
			timeout  int64
			want     int64
		}{
			{"cmp1", 0, 3600000},   // the server's
			{"cmp1", 60000, 60000}, // the run's own, above or below
			{"cmp1", 2 * 3600000, 2 * 3600000},
			{"cmp9", 0, 5000}, // the wall budget's, below the server's
		} {
			cmd, _, err := c.RunCommand(f.ctx, "t1", tc.computer, bothy.RunRequest{Argv: []string{"true"}, TimeoutMS: tc.timeout})
			if err != nil {
				t.Fatal(err)
			} else if cmd.TimeoutMS != tc.want {
				t.Errorf("%s, timeout_ms %d: stored timeout %d, want %d", tc.computer, tc.timeout, cmd.TimeoutMS, tc.want)
			}
		}
	})
}
