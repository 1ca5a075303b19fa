package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/supervisor"
)

// reportingControl is a control plane that records the command reports
// it is sent and the events appended. Report of a never_seen state tells
// neverSeen and then waits for release, so that a test can deliver the
// next poll answer while the report is out, as the control plane's
// re-dispatch does.
type reportingControl struct {
	runtime.Control // the rest is not called

	neverSeen chan struct{}
	release   chan struct{}

	mu       sync.Mutex
	reports  []string
	full     []*runtime.Report
	released chan *runtime.ReleaseRequest
}

func (c *reportingControl) Report(ctx context.Context, _, _ string, r *runtime.Report) error {
	c.mu.Lock()
	first := r.State == bothy.RunNeverSeen && !slices.Contains(c.reports, bothy.RunNeverSeen)
	c.reports = append(c.reports, r.State)
	c.full = append(c.full, r)
	c.mu.Unlock()
	if first {
		c.neverSeen <- struct{}{}
		select {
		case <-c.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (c *reportingControl) AppendEvents(_ context.Context, _, _ string, events []bothy.Event) (*runtime.EventsResponse, error) {
	return &runtime.EventsResponse{LastSeq: events[len(events)-1].Seq}, nil
}

func (c *reportingControl) Released(_ context.Context, _ string, req *runtime.ReleaseRequest) error {
	select {
	case c.released <- req:
	default:
	}
	return nil
}

// waitLost waits until the lease is torn down, which only lost does
// here (after the reports), bounded against hanging. (The teardown then
// waits for the supervisor's process to end, and the supervisor serves in
// this one: its release is not waited for.)
func (c *reportingControl) waitLost(t *testing.T, l *lease) {
	t.Helper()
	for range 6000 {
		l.mu.Lock()
		state := l.state
		l.mu.Unlock()
		if state != leaseReady {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the lease was never torn down; reports %v", c.sent())
}

func (c *reportingControl) sent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reports)
}

// readyLease returns a ready lease of the process provider whose
// supervisor serves in this process, and the control plane it reports to.
func readyLease(t *testing.T) (*lease, *reportingControl) {
	t.Helper()
	dir := t.TempDir()
	ws, supDir := filepath.Join(dir, "ws"), filepath.Join(dir, "sup")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	prov := process.New()
	h, err := prov.Start(t.Context(), bothy.LeaseSpec{LeaseID: "lse_1", ComputerID: "cmp_1", Generation: 1, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if err := supervisor.Init(supDir, h); err != nil {
		t.Fatal(err)
	}
	handle, err := h.Encode()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- supervisor.Serve(ctx, supervisor.Config{Dir: supDir, Provider: prov, Handle: handle, Logger: log})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("supervisor: %v", err)
		}
	})
	var sup *supervisor.Client
	for sup == nil {
		select {
		case err := <-served:
			t.Fatalf("supervisor ended at start: %v", err)
		default:
		}
		if sup, err = supervisor.Dial(t.Context(), supervisor.SocketPath(supDir)); err != nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Cleanup(func() { sup.Close() })
	blobs, err := localblob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctl := &reportingControl{neverSeen: make(chan struct{}), release: make(chan struct{})}
	a := &Agent{cfg: Config{Control: ctl, Blobs: blobs}, log: log, leases: map[string]*lease{}}
	l := newLease(a, &runtime.LeaseWork{LeaseID: "lse_1", TenantID: "ten_1", ComputerID: "cmp_1", Generation: 1})
	l.dir, l.state, l.sup, l.work = dir, leaseReady, sup, &runtime.LeaseWork{LeaseID: "lse_1", Credential: "cred"}
	return l, ctl
}

// waitUntil waits for cond, which reads the lease's state under its
// lock, to hold.
func waitUntil(t *testing.T, l *lease, what string, cond func() bool) {
	t.Helper()
	for range 6000 {
		l.mu.Lock()
		ok := cond()
		l.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("gave up waiting until %s", what)
}

// TestLease_RunWhileBusy: the control plane re-dispatches a command as
// soon as the runtime reports it never_seen, so its run (sent once) can
// arrive while the status action that reported it is still in flight. The
// run is held and started once the status action ends, or, if the lease
// is stopping by then, reported never_seen so it runs on the next lease.
func TestLease_RunWhileBusy(t *testing.T) {
	const id = "cmd_1"
	poll := func(actions ...string) *runtime.LeaseWork {
		w := &runtime.LeaseWork{LeaseID: "lse_1", Credential: "cred"}
		for _, act := range actions {
			cw := &runtime.CommandWork{CommandID: id, Action: act}
			if act == runtime.ActRun {
				cw.Spec = &bothy.RunSpec{Argv: []string{"true"}}
			}
			w.Commands = append(w.Commands, cw)
		}
		return w
	}
	stopping := func(l *lease) {
		l.mu.Lock()
		l.state = leaseStopping
		l.mu.Unlock()
	}
	for _, tc := range []struct {
		name string
		// before and after run before the run arrives and after it
		// arrived, while the status report is out.
		before, after func(*lease)
		want          []string
	}{
		{name: "Ready", want: []string{bothy.RunNeverSeen, bothy.RunRunning, bothy.RunFinished}},
		{name: "StoppingAfterRun", after: stopping, want: []string{bothy.RunNeverSeen, bothy.RunNeverSeen}},
		{name: "StoppingBeforeRun", before: stopping, want: []string{bothy.RunNeverSeen, bothy.RunNeverSeen}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			l, ctl := readyLease(t)
			l.update(ctx, poll(runtime.ActStatus))
			<-ctl.neverSeen // the status action reports never_seen
			if tc.before != nil {
				tc.before(l)
			}
			l.update(ctx, poll(runtime.ActRun))
			if tc.after != nil {
				tc.after(l)
			}
			close(ctl.release)
			// Settled: nothing of the command is in flight any more
			// (after a never_seen refusal in teardown, the command stays
			// marked, and the report is what is waited for).
			waitUntil(t, l, "the lease settles", func() bool {
				return (!l.inflight[id] && !l.pumps[id]) || len(ctl.sent()) >= len(tc.want)
			})
			waitUntil(t, l, "its stream ends", func() bool { return !l.pumps[id] })
			if got := ctl.sent(); !slices.Equal(got, tc.want) {
				t.Fatalf("reports %v, want %v", got, tc.want)
			}
			st, err := l.sup.Status(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if wantState := tc.want[len(tc.want)-1]; st.State != wantState {
				t.Fatalf("the supervisor says %s, want %s", st.State, wantState)
			}
		})
	}
}

// dyingProvider is the process provider whose sandbox is gone (Recover
// says ENOTFOUND) from its alive'th Recover on.
type dyingProvider struct {
	*process.Provider
	mu    sync.Mutex
	alive int
}

func (p *dyingProvider) Recover(ctx context.Context, handle []byte) (*bothy.SandboxHandle, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.alive <= 0 {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease lse_1 has ended (its init 1 is gone)")
	}
	p.alive--
	return p.Provider.Recover(ctx, handle)
}

// dyingLease is a ready lease of a dyingProvider alive for that many
// Recovers.
func dyingLease(t *testing.T, alive int) (*lease, *reportingControl) {
	l, ctl := readyLease(t)
	prov := process.New()
	h, err := prov.Start(t.Context(), bothy.LeaseSpec{LeaseID: "lse_1", ComputerID: "cmp_1", Generation: 1, Workspace: filepath.Join(l.dir, "ws")})
	if err != nil {
		t.Fatal(err)
	}
	l.rec.Provider, l.rec.Handle = process.Name, must(h.Encode())
	l.a.cfg.Providers = map[string]bothy.Provider{process.Name: &dyingProvider{Provider: prov, alive: alive}}
	ctl.released = make(chan *runtime.ReleaseRequest, 1)
	l.a.gone = map[string]*tombstone{}
	return l, ctl
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestLease_RunAfterSandboxDied: a run that arrives once the lease's
// sandbox has ended never reaches the supervisor (nothing of it is
// journaled, so nothing of it ran): it is reported never_seen, to run on
// the next lease, and the lease is released as lost.
func TestLease_RunAfterSandboxDied(t *testing.T) {
	const id = "cmd_1"
	l, ctl := dyingLease(t, 0)
	close(ctl.release)
	go func() {
		for range ctl.neverSeen {
		}
	}()
	l.update(t.Context(), &runtime.LeaseWork{LeaseID: "lse_1", Credential: "cred", Commands: []*runtime.CommandWork{
		{CommandID: id, Action: runtime.ActRun, Spec: &bothy.RunSpec{Argv: []string{"true"}}}}})
	ctl.waitLost(t, l)
	// Had the supervisor been given the run, it would have run it (its
	// provider's sandbox lives) and the lease would report it running.
	if got := ctl.sent(); !slices.Equal(got, []string{bothy.RunNeverSeen}) {
		t.Fatalf("reports %v, want [never_seen]", got)
	}
}

// TestLease_SandboxDiesUnderCommand: a command killed because its
// lease's sandbox died ends with sandbox_lost, and the lease is released
// as lost.
func TestLease_SandboxDiesUnderCommand(t *testing.T) {
	const id = "cmd_1"
	l, ctl := dyingLease(t, 1) // alive when the run arrives, gone at its end
	l.update(t.Context(), &runtime.LeaseWork{LeaseID: "lse_1", Credential: "cred", Commands: []*runtime.CommandWork{
		{CommandID: id, Action: runtime.ActRun, Spec: &bothy.RunSpec{Argv: []string{"sh", "-c", "kill -KILL $$"}}}}})
	ctl.waitLost(t, l)
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if got := ctl.reports; !slices.Equal(got, []string{bothy.RunRunning, bothy.RunFinished}) {
		t.Fatalf("reports %v, want [running finished]", got)
	}
	if e := ctl.full[1].Exit; e == nil || !e.SandboxLost || e.Signal == "" {
		t.Fatalf("the end report's exit %+v, want sandbox_lost and a signal", e)
	}
}
