package computetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

// Fake is a ComputeService over the real store with no runtime: RunCommand
// admits the command, acquires a lease if the computer has none, dispatches
// the command to it and marks it running, all at once. Tests then append its
// events and end it with Emit and Finish, as a runtime would, through the
// store. It records the calls it gets.
type Fake struct {
	store bothy.Store

	mu      sync.Mutex
	n       int
	calls   []string
	stdin   map[string]string // by command id
	wake    chan struct{}     // closed and replaced on every change
	waiting chan string       // gets the command id of each WaitCommand, if not full
	started chan string       // gets the command id of each command RunCommand creates, if not full
}

var _ bothy.ComputeService = (*Fake)(nil)

// NewFake returns a Fake over store.
func NewFake(store bothy.Store) *Fake {
	return &Fake{store: store, stdin: map[string]string{}, wake: make(chan struct{}),
		waiting: make(chan string, 16), started: make(chan string, 16)}
}

// Waiting gets the command id of each WaitCommand call; it holds up to 16
// and drops the rest.
func (f *Fake) Waiting() <-chan string { return f.waiting }

// Started gets the command id of each command RunCommand creates; it holds
// up to 16 and drops the rest.
func (f *Fake) Started() <-chan string { return f.started }

// Calls returns the calls recorded so far, such as "run ID" or "stop ID".
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Called reports whether a call was recorded.
func (f *Fake) Called(call string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.calls, call)
}

// Stdin returns the stdin the command with id was run with.
func (f *Fake) Stdin(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stdin[id]
}

func (f *Fake) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *Fake) nextID(prefix string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return fmt.Sprintf("%s%d", prefix, f.n)
}

// changed wakes every waiter.
func (f *Fake) changed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.wake)
	f.wake = make(chan struct{})
}

// until blocks until done reports true, re-checking after every change.
func (f *Fake) until(ctx context.Context, done func() (bool, error)) error {
	for {
		f.mu.Lock()
		wake := f.wake
		f.mu.Unlock()
		if ok, err := done(); err != nil || ok {
			return err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// RunCommand admits, dispatches and starts the command at once.
func (f *Fake) RunCommand(ctx context.Context, tenantID, computerID string, req bothy.RunRequest) (*bothy.Command, bool, error) {
	f.record("run %s", computerID)
	if err := req.Validate(); err != nil {
		return nil, false, err
	}
	c, err := f.store.FindComputer(ctx, tenantID, computerID)
	if err != nil {
		return nil, false, err
	} else if c.State == bothy.StateDestroyed {
		return nil, false, bothy.Errorf(bothy.ECONFLICT, "computer %q is destroyed", computerID)
	} else if err := bothy.AdmitRun(c, &req); err != nil {
		return nil, false, err
	}
	var names []string
	for k := range req.Env {
		names = append(names, k)
	}
	slices.Sort(names)
	cmd := &bothy.Command{
		ID: f.nextID("cmd_fake"), TenantID: tenantID, ComputerID: computerID, IdempotencyKey: req.IdempotencyKey,
		Argv: req.Argv, Script: req.Script, Cwd: req.Cwd, EnvNames: names, TimeoutMS: req.TimeoutMS,
	}
	if created, err := f.store.CreateCommand(ctx, cmd); err != nil || !created {
		return cmd, false, err
	}
	l, err := f.store.ActiveLease(ctx, tenantID, computerID)
	if bothy.ErrorCode(err) == bothy.ENOTFOUND {
		l = &bothy.Lease{
			ID: f.nextID("lease_fake"), TenantID: tenantID, ComputerID: computerID, Generation: c.Generation + 1,
			Provider: "fake", ExpiresAt: time.Now().Add(time.Hour),
		}
		err = f.store.AcquireLease(ctx, l)
	}
	if err != nil {
		return nil, false, err
	}
	if _, err := f.store.DispatchCommand(ctx, tenantID, cmd.ID, l.ID, l.Generation); err != nil {
		return nil, false, err
	}
	cmd, err = f.store.TransitionCommand(ctx, tenantID, cmd.ID, []string{bothy.CommandDispatched}, bothy.CommandRunning, bothy.CommandUpdate{Generation: l.Generation})
	if err != nil {
		return nil, false, err
	}
	f.mu.Lock()
	f.stdin[cmd.ID] = req.Stdin
	f.mu.Unlock()
	f.changed()
	select {
	case f.started <- cmd.ID:
	default:
	}
	return cmd, true, nil
}

// WaitCommand blocks until the command ends or ctx is done.
func (f *Fake) WaitCommand(ctx context.Context, tenantID, id string) (*bothy.Command, error) {
	f.record("wait %s", id)
	select {
	case f.waiting <- id:
	default:
	}
	var cmd *bothy.Command
	err := f.until(ctx, func() (bool, error) {
		var err error
		cmd, err = f.store.FindCommand(ctx, tenantID, id)
		return err == nil && bothy.CommandTerminal(cmd.State), err
	})
	return cmd, err
}

// WaitEvents blocks until the command has an event after seq after, or ends.
func (f *Fake) WaitEvents(ctx context.Context, tenantID, id string, after int64) error {
	return f.until(ctx, func() (bool, error) {
		cmd, err := f.store.FindCommand(ctx, tenantID, id)
		return err == nil && (cmd.LastSeq > after || bothy.CommandTerminal(cmd.State)), err
	})
}

// CancelCommand marks an admitted or running command cancelled.
func (f *Fake) CancelCommand(ctx context.Context, tenantID, id string) (*bothy.Command, error) {
	f.record("cancel %s", id)
	cmd, err := f.store.FindCommand(ctx, tenantID, id)
	if err != nil || bothy.CommandTerminal(cmd.State) {
		return cmd, err
	}
	cmd, err = f.store.TransitionCommand(ctx, tenantID, id, []string{bothy.CommandAdmitted, bothy.CommandRunning}, bothy.CommandCancelled, bothy.CommandUpdate{})
	f.changed()
	return cmd, err
}

// StopComputer releases the computer's lease, if it has one, which makes
// it cold; a destroyed computer is ECONFLICT.
func (f *Fake) StopComputer(ctx context.Context, tenantID, id string) (*bothy.Computer, error) {
	f.record("stop %s", id)
	c, err := f.store.FindComputer(ctx, tenantID, id)
	if err != nil {
		return nil, err
	} else if c.State == bothy.StateDestroyed {
		return nil, bothy.Errorf(bothy.ECONFLICT, "computer %q is destroyed", id)
	}
	l, err := f.store.ActiveLease(ctx, tenantID, id)
	if bothy.ErrorCode(err) == bothy.ENOTFOUND {
		return c, nil
	} else if err != nil {
		return nil, err
	}
	if err := f.store.ReleaseLease(ctx, tenantID, l.ID, l.Generation, bothy.LeaseReleased, ""); err != nil {
		return nil, err
	}
	f.changed()
	return f.store.FindComputer(ctx, tenantID, id)
}

// DestroyComputer marks the computer destroyed.
func (f *Fake) DestroyComputer(ctx context.Context, tenantID, id string) (*bothy.Computer, error) {
	f.record("destroy %s", id)
	if err := f.store.SetComputerState(ctx, tenantID, id, bothy.StateDestroyed); err != nil {
		return nil, err
	}
	return f.store.FindComputer(ctx, tenantID, id)
}

// Checkpoint returns the computer's latest revision, or an empty one if it
// has none.
func (f *Fake) Checkpoint(ctx context.Context, tenantID, id string) (*bothy.Revision, error) {
	f.record("checkpoint %s", id)
	c, err := f.store.FindComputer(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	revs, err := f.store.ListRevisions(ctx, tenantID, id, 0, 1)
	if err != nil || len(revs) == 0 {
		return &bothy.Revision{ComputerID: c.ID}, err
	}
	return revs[0], nil
}

// Emit appends output events to a running command, as its runtime would.
func (f *Fake) Emit(t *testing.T, tenantID, id string, evs ...bothy.Event) {
	t.Helper()
	cmd, err := f.store.FindCommand(t.Context(), tenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.AppendEvents(t.Context(), tenantID, id, cmd.Generation, evs); err != nil {
		t.Fatal(err)
	}
	f.changed()
}

// Finish ends a running command in state with exit code exit.
func (f *Fake) Finish(t *testing.T, tenantID, id, state string, exit int) *bothy.Command {
	t.Helper()
	cmd, err := f.store.FindCommand(t.Context(), tenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	u := bothy.CommandUpdate{Generation: cmd.Generation}
	if state == bothy.CommandCompleted {
		u.ExitCode = &exit
	}
	cmd, err = f.store.TransitionCommand(t.Context(), tenantID, id, []string{bothy.CommandRunning}, state, u)
	if err != nil {
		t.Fatal(err)
	}
	f.changed()
	return cmd
}
