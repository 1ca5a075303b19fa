package runtimetest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/runtime"
)

// Agent plays an agent against a runtime.Control, with no sandbox, for
// the suites of what sits above the runtime protocol (the ComputeService,
// the files of active computers). It polls, reports every lease ready,
// acknowledges every command it is sent to run, answers a checkpoint
// request with the revision its disk holds, a stop by releasing the lease,
// a cancel by reporting the command cancelled, and a files-API change
// (runtime.ApplyWork) by restoring the new tree to a directory and
// checkpointing that directory, as the real agent does on its disk. Tests
// stream a command's output and end it with Emit and Finish.
type Agent struct {
	t     *testing.T
	ctl   runtime.Control
	token string
	id    string
	blobs bothy.BlobStore

	mu       sync.Mutex
	leases   map[string]*agentLease
	commands map[string]*agentCommand
	wake     chan struct{} // closed and replaced on every change
}

// agentLease is what the agent holds of a lease.
type agentLease struct {
	work     *runtime.LeaseWork // the newest answer about it
	rev      int64              // the revision its disk holds
	ready    bool
	ckptDone int64
	applied  map[int64]bool
}

// agentCommand is a command the agent was sent to run.
type agentCommand struct {
	leaseID string
	lastSeq int64
	running bool // reported running: Emit and Finish may go ahead
	ended   bool
}

// StartAgent starts an agent with id that polls ctl with token until the
// test ends. blobs is the store of the computers' checkpoints, for
// applying files-API changes; nil refuses them with EUNAVAILABLE.
func StartAgent(t *testing.T, ctl runtime.Control, token, id string, blobs bothy.BlobStore) *Agent {
	t.Helper()
	a := &Agent{t: t, ctl: ctl, token: token, id: id, blobs: blobs,
		leases: map[string]*agentLease{}, commands: map[string]*agentCommand{}, wake: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return a
}

func (a *Agent) run(ctx context.Context) {
	var version int64
	for ctx.Err() == nil {
		resp, err := a.ctl.Poll(ctx, a.token, &runtime.PollRequest{AgentID: a.id, Leases: a.held(), Version: version, Wait: 2 * time.Second})
		if err != nil {
			a.fail(ctx, "poll", err)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		version = resp.Version
		a.handle(ctx, resp)
	}
}

// fail reports an unexpected protocol error, unless the agent is stopping.
func (a *Agent) fail(ctx context.Context, what string, err error) {
	if ctx.Err() == nil && err != nil {
		a.t.Errorf("runtimetest.Agent: %s: %v", what, err)
	}
}

func (a *Agent) held() []runtime.HeldLease {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []runtime.HeldLease
	for id, l := range a.leases {
		out = append(out, runtime.HeldLease{LeaseID: id, TenantID: l.work.TenantID, Generation: l.work.Generation})
	}
	return out
}

// changed wakes the waiters of Emit and Finish.
func (a *Agent) changed() {
	a.mu.Lock()
	defer a.mu.Unlock()
	close(a.wake)
	a.wake = make(chan struct{})
}

func (a *Agent) handle(ctx context.Context, resp *runtime.PollResponse) {
	defer a.changed()
	listed := map[string]bool{}
	for _, w := range resp.Leases {
		listed[w.LeaseID] = true
		a.mu.Lock()
		l := a.leases[w.LeaseID]
		if l == nil {
			l = &agentLease{applied: map[int64]bool{}}
			a.leases[w.LeaseID] = l
		}
		l.work, l.rev = w, max(l.rev, w.Revision)
		a.mu.Unlock()
		if !l.ready {
			a.fail(ctx, "ready", a.ctl.Ready(ctx, w.Credential, &runtime.ReadyRequest{Host: a.id, SandboxRef: "fake"}))
			l.ready = true
		}
		if w.Stop {
			a.fail(ctx, "release", a.ctl.Released(ctx, w.Credential, &runtime.ReleaseRequest{Disposition: bothy.LeaseReleased}))
			a.drop(w.LeaseID)
			continue
		}
		if w.Checkpoint > l.ckptDone {
			l.ckptDone = w.Checkpoint
			a.fail(ctx, "checkpointed", a.ctl.Checkpointed(ctx, w.Credential, &runtime.CheckpointedRequest{Checkpoint: w.Checkpoint, Revision: l.rev}))
		}
		for _, ap := range w.Applies {
			if !l.applied[ap.ID] {
				l.applied[ap.ID] = true
				a.apply(ctx, l, ap)
			}
		}
		for _, cw := range w.Commands {
			a.command(ctx, w, cw)
		}
	}
	a.mu.Lock()
	var gone []string
	for id := range a.leases {
		if !listed[id] {
			gone = append(gone, id)
		}
	}
	a.mu.Unlock()
	for _, id := range gone {
		a.drop(id) // released by the control plane: torn down
	}
}

// drop forgets a lease and ends its commands.
func (a *Agent) drop(leaseID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.leases, leaseID)
	for _, c := range a.commands {
		if c.leaseID == leaseID {
			c.ended = true
		}
	}
}

// command acts on one command of a lease's answer.
func (a *Agent) command(ctx context.Context, w *runtime.LeaseWork, cw *runtime.CommandWork) {
	a.mu.Lock()
	c := a.commands[cw.CommandID]
	known := c != nil && !c.ended
	var last int64
	if c != nil {
		last = c.lastSeq
	}
	switch {
	case cw.Action == runtime.ActRun && c == nil:
		a.commands[cw.CommandID] = &agentCommand{leaseID: w.LeaseID}
		known = true
	case cw.Action == runtime.ActCancel && known:
		c.ended = true
	}
	a.mu.Unlock()
	switch cw.Action {
	case runtime.ActRun, runtime.ActStatus:
		r := &runtime.Report{State: bothy.RunRunning, LastSeq: last}
		if !known {
			r = &runtime.Report{State: bothy.RunNeverSeen}
		}
		err := a.ctl.Report(ctx, w.Credential, cw.CommandID, r)
		a.fail(ctx, "report "+r.State, err)
		if known && err == nil {
			a.mu.Lock()
			a.commands[cw.CommandID].running = true
			a.mu.Unlock()
		}
	case runtime.ActCancel:
		if known {
			r := &runtime.Report{State: bothy.RunFinished, Exit: &bothy.Exit{ExecResult: bothy.ExecResult{ExitCode: -1}, Cancelled: true}, LastSeq: last}
			a.fail(ctx, "report cancelled", a.ctl.Report(ctx, w.Credential, cw.CommandID, r))
		}
	}
}

// apply makes the lease's disk the tree of ap and commits it, answering
// Applied with the revision or the error.
func (a *Agent) apply(ctx context.Context, l *agentLease, ap *runtime.ApplyWork) {
	req := &runtime.AppliedRequest{ID: ap.ID}
	rev, err := a.commitTree(ctx, l, ap)
	if err != nil {
		var be *bothy.Error
		if !errors.As(err, &be) {
			be = &bothy.Error{Code: bothy.EINTERNAL, Message: err.Error()}
		}
		req.Error = be
	} else {
		req.Revision = rev
	}
	a.fail(ctx, "applied", a.ctl.Applied(ctx, l.work.Credential, req))
}

func (a *Agent) commitTree(ctx context.Context, l *agentLease, ap *runtime.ApplyWork) (int64, error) {
	w := l.work
	if a.blobs == nil {
		return 0, bothy.Errorf(bothy.EUNAVAILABLE, "this agent has no blob store")
	} else if ap.Base != l.rev {
		return 0, bothy.Errorf(bothy.ECONFLICT, "the workspace is at revision %d, not %d", l.rev, ap.Base)
	}
	repo, err := checkpoint.NewRepo(a.blobs, w.TenantID, w.HashKey)
	if err != nil {
		return 0, err
	}
	snap, err := repo.Open(ctx, ap.Root, ap.Packs)
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "runtimetest-disk-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if err := snap.Restore(ctx, dir, checkpoint.RestoreOptions{}); err != nil {
		return 0, err
	}
	res, err := repo.Checkpoint(ctx, dir, snap, checkpoint.CheckpointOptions{})
	if err != nil {
		return 0, err
	}
	rev, err := a.ctl.Commit(ctx, w.Credential, &runtime.CommitRequest{Base: ap.Base, RootDigest: res.Root.String(), Packs: res.Packs, Size: res.Size, FileCount: res.FileCount})
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	l.rev = rev.Number
	a.mu.Unlock()
	return rev.Number, nil
}

// running waits until the agent runs the command, and returns the
// credential of its lease and its newest seq.
func (a *Agent) running(t *testing.T, commandID string) (*agentCommand, string) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		c, wake := a.commands[commandID], a.wake
		var cred string
		if c != nil && c.running && !c.ended && a.leases[c.leaseID] != nil {
			cred = a.leases[c.leaseID].work.Credential
		}
		a.mu.Unlock()
		if cred != "" {
			return c, cred
		}
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("runtimetest.Agent: command %s was not sent to run within 10s", commandID)
		}
	}
}

// Emit appends output events to a running command, as its runtime would,
// numbering those without a seq. It waits until the command runs.
func (a *Agent) Emit(t *testing.T, tenantID, commandID string, evs ...bothy.Event) {
	t.Helper()
	c, cred := a.running(t, commandID)
	a.mu.Lock()
	for i := range evs {
		if evs[i].Seq == 0 {
			evs[i].Seq = c.lastSeq + int64(i) + 1
		}
	}
	a.mu.Unlock()
	resp, err := a.ctl.AppendEvents(t.Context(), cred, commandID, evs)
	if err != nil {
		t.Fatalf("runtimetest.Agent: append events of %s: %v", commandID, err)
	}
	a.mu.Lock()
	c.lastSeq = resp.LastSeq
	a.mu.Unlock()
}

// Finish ends a running command in state (a bothy.Command* terminal
// state) with exit code exit, as its runtime would report it. It waits
// until the command runs.
func (a *Agent) Finish(t *testing.T, tenantID, commandID, state string, exit int) {
	t.Helper()
	c, cred := a.running(t, commandID)
	a.mu.Lock()
	c.ended = true
	r := &runtime.Report{State: bothy.RunFinished, LastSeq: c.lastSeq, Exit: &bothy.Exit{ExecResult: bothy.ExecResult{ExitCode: exit}}}
	a.mu.Unlock()
	switch state {
	case bothy.CommandCompleted:
	case bothy.CommandTimedOut:
		r.Exit.TimedOut = true
	case bothy.CommandCancelled:
		r.Exit.Cancelled = true
	case bothy.CommandFailed:
		r.State, r.Exit, r.Error = bothy.RunFailed, nil, "failed by the test"
	case bothy.CommandLost:
		r.State, r.Exit, r.Error = bothy.RunLost, nil, "lost by the test"
	default:
		t.Fatalf("runtimetest.Agent: %q is not a state a runtime ends a command in", state)
	}
	if err := a.ctl.Report(t.Context(), cred, commandID, r); err != nil {
		t.Fatalf("runtimetest.Agent: report %s %s: %v", commandID, state, err)
	}
}

// Activate makes a cold computer active through compute, the control
// plane this agent serves, as the API would: it runs a command, which the
// agent starts the lease for and ends. The computer is stopped when the
// test ends, since every poll answers for every lease an agent holds.
func (a *Agent) Activate(t *testing.T, compute bothy.ComputeService, tenantID, computerID string) {
	t.Helper()
	cmd, _, err := compute.RunCommand(t.Context(), tenantID, computerID, bothy.RunRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatalf("runtimetest.Agent: start %s: %v", computerID, err)
	}
	a.Finish(t, tenantID, cmd.ID, bothy.CommandCompleted, 0)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := compute.StopComputer(ctx, tenantID, computerID); err != nil {
			t.Errorf("runtimetest.Agent: stop %s: %v", computerID, err)
		}
	})
}
