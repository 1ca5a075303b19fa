// Package runtimetest is the conformance suite for runtime.Control, the
// control plane as a runtime sees it. The suite plays the agent, driving
// Poll, Ready, Report, AppendEvents, Commit, Checkpointed, Applied,
// Released and AgentCredential by hand, and the API side through the same control plane's
// ComputeService. Every implementation calls TestControl from its tests:
// the controller directly, and the runtime HTTP client over the runtime
// HTTP handler.
//
// The package also holds Agent, a runtime without sandboxes for the
// suites of the layers above the protocol.
package runtimetest

import (
	"context"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
)

// Env is a control plane under test.
type Env struct {
	// Control is the implementation under test.
	Control runtime.Control
	// AgentToken authenticates polls for any agent id.
	AgentToken string
	// Compute is the same control plane's ComputeService, through which
	// the suite admits, cancels and stops as the API would.
	Compute bothy.ComputeService
	// Store is the control plane's store, read to check what each call did.
	Store bothy.Store
	// Profile is a computer profile the control plane serves.
	Profile string
}

// TestControl runs the conformance suite. open is called once per subtest
// and must return a new control plane over an empty store that lives until
// the subtest ends.
func TestControl(t *testing.T, open func(t *testing.T) *Env) {
	t.Run("Poll", func(t *testing.T) { testPoll(t, open) })
	t.Run("Ready", func(t *testing.T) { testReady(t, open) })
	t.Run("Released", func(t *testing.T) { testReleased(t, open) })
	t.Run("Commit", func(t *testing.T) { testCommit(t, open) })
	t.Run("Checkpointed", func(t *testing.T) { testCheckpointed(t, open) })
	t.Run("Applied", func(t *testing.T) { testApplied(t, open) })
	t.Run("Report", func(t *testing.T) { testReport(t, open) })
	t.Run("AppendEvents", func(t *testing.T) { testAppendEvents(t, open) })
	t.Run("StaleGeneration", func(t *testing.T) { testStaleGeneration(t, open) })
	t.Run("AgentCredential", func(t *testing.T) { testAgentCredential(t, open) })
}

// agentID is the agent the suite plays.
const agentID = "agent-1"

// fixture is a control plane with tenant t1 and its cold computer cmp1.
type fixture struct {
	*Env
	t      *testing.T
	ctx    context.Context
	tenant *bothy.Tenant
	comp   *bothy.Computer
}

func newFixture(t *testing.T, open func(t *testing.T) *Env) *fixture {
	t.Helper()
	f := &fixture{Env: open(t), t: t, ctx: t.Context()}
	f.tenant = f.newTenant("t1")
	f.comp = f.newComputer("t1", "cmp1")
	return f
}

func (f *fixture) newTenant(id string) *bothy.Tenant {
	f.t.Helper()
	tn, err := bothy.NewTenant(id, id)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.Store.CreateTenant(f.ctx, tn); err != nil {
		f.t.Fatal(err)
	}
	return tn
}

func (f *fixture) newComputer(tenantID, id string) *bothy.Computer {
	f.t.Helper()
	c := &bothy.Computer{ID: id, TenantID: tenantID, Owner: "o", Profile: f.Profile, State: bothy.StateCold}
	if err := f.Store.CreateComputer(f.ctx, c); err != nil {
		f.t.Fatal(err)
	}
	return c
}

// run admits a command of argv on a computer, with the cwd src.
func (f *fixture) run(tenantID, computerID string, argv ...string) *bothy.Command {
	f.t.Helper()
	cmd, created, err := f.Compute.RunCommand(f.ctx, tenantID, computerID, bothy.RunRequest{Argv: argv, Cwd: "src"})
	if err != nil || !created {
		f.t.Fatalf("RunCommand(%s/%s): created %v, %v", tenantID, computerID, created, err)
	}
	return cmd
}

// pollAll polls as the suite's agent, holding held.
func (f *fixture) pollAll(held ...runtime.HeldLease) *runtime.PollResponse {
	f.t.Helper()
	resp, err := f.Control.Poll(f.ctx, f.AgentToken, &runtime.PollRequest{AgentID: agentID, Leases: held})
	if err != nil {
		f.t.Fatalf("Poll: %v", err)
	}
	return resp
}

// poll polls and returns the work of computer cmp1, or nil.
func (f *fixture) poll(held ...runtime.HeldLease) *runtime.LeaseWork {
	f.t.Helper()
	return workOf(f.pollAll(held...), f.comp.ID)
}

func workOf(resp *runtime.PollResponse, computerID string) *runtime.LeaseWork {
	for _, w := range resp.Leases {
		if w.ComputerID == computerID {
			return w
		}
	}
	return nil
}

// ready admits a command on cmp1, polls its lease, reports it ready and
// polls again: the answer sends the command to run.
func (f *fixture) ready() (*bothy.Command, *runtime.LeaseWork) {
	f.t.Helper()
	cmd := f.run(f.tenant.ID, f.comp.ID, "true")
	w := f.poll()
	if w == nil {
		f.t.Fatal("the poll after a command was admitted lists no lease")
	}
	if err := f.Control.Ready(f.ctx, w.Credential, &runtime.ReadyRequest{Host: "h", SandboxRef: "s"}); err != nil {
		f.t.Fatalf("Ready: %v", err)
	}
	return cmd, f.poll()
}

// running brings a command of cmp1 to running and returns it with its
// lease's work.
func (f *fixture) running() (*bothy.Command, *runtime.LeaseWork) {
	f.t.Helper()
	cmd, w := f.ready()
	if err := f.Control.Report(f.ctx, w.Credential, cmd.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
		f.t.Fatalf("Report(running): %v", err)
	}
	f.wantState(cmd.ID, bothy.CommandRunning)
	return cmd, w
}

// held is the HeldLease of w.
func held(w *runtime.LeaseWork) runtime.HeldLease {
	return runtime.HeldLease{LeaseID: w.LeaseID, TenantID: w.TenantID, Generation: w.Generation}
}

// command returns the stored command.
func (f *fixture) command(id string) *bothy.Command {
	f.t.Helper()
	cmd, err := f.Store.FindCommand(f.ctx, f.tenant.ID, id)
	if err != nil {
		f.t.Fatalf("FindCommand(%s): %v", id, err)
	}
	return cmd
}

// wantState fails the test unless the stored command is in state.
func (f *fixture) wantState(id, state string) *bothy.Command {
	f.t.Helper()
	cmd := f.command(id)
	if cmd.State != state {
		f.t.Fatalf("command %s is %s, want %s", id, cmd.State, state)
	}
	return cmd
}

// computer returns the stored computer cmp1.
func (f *fixture) computer() *bothy.Computer {
	f.t.Helper()
	c, err := f.Store.FindComputer(f.ctx, f.tenant.ID, f.comp.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// async runs fn in a goroutine and returns a channel of its error.
func async(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

// await returns what ch receives within 10 seconds.
func await(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10s", what)
		return nil
	}
}

// root is a made-up tree digest: the control plane stores digests, it
// does not read them.
func root(n byte) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 64)
	for i := range b {
		b[i] = '0'
	}
	b[62], b[63] = hex[n>>4], hex[n&15]
	return string(b)
}
