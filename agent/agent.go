// Package agent is bothy's runtime on one host: it dials out to the control
// plane (package runtime's protocol), starts a sandbox for each lease
// assigned to it over the lease's workspace (a read-only materialized base
// revision with a writable overlay, or a plain copy of it where the agent
// is not root; package hostcache), gives the lease a
// supervisor process (package supervisor) that runs its commands and
// journals their output on disk, streams that output back by sequence
// number, and checkpoints the workspace after each command.
//
// The agent keeps each lease's state under its directory, so a restarted
// agent (or a restarted embedded server) finds its leases, dials their
// supervisors, which kept running, and resumes every stream after the seq
// the control plane acknowledged: no output is lost and nothing runs twice.
package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/egress"
	"github.com/bothyhq/bothy/hostcache"
	"github.com/bothyhq/bothy/runtime"
)

// Config configures an Agent.
type Config struct {
	// ID names the agent to the control plane; leases are assigned to it.
	ID string
	// Dir holds the agent's state: DIR/leases/<lease id>/.
	Dir string
	// Control is the control plane (a runtime.Client), and Token the
	// agent's token for polling it.
	Control runtime.Control
	Token   string
	// TokenSource, if set, is called for the token of each poll instead
	// of Token: an enrolled agent's token changes when it is renewed.
	TokenSource func() string
	// Providers run sandboxes, by name.
	Providers map[string]bothy.Provider
	// Blobs is the blob store that revisions' packs live in, and Cache the
	// host cache of materialized revisions.
	Blobs bothy.BlobStore
	Cache *hostcache.Cache
	// Workspace is how a lease's workspace is materialized: an overlay
	// over Cache ("" or hostcache.ModeOverlay, which needs root) or a
	// plain copy (hostcache.ModeCopy, which needs no privilege and serves
	// only providers that run commands as the agent's own user).
	Workspace hostcache.Mode
	// SupervisorCommand is the program and arguments that run a
	// supervisor (supervisor.Main); "-dir DIR" is appended.
	SupervisorCommand []string
	// Egress gives each lease whose egress mode is not none a network
	// namespace whose only way out is Broker; nil refuses such leases.
	Egress *Egress
	// PollWait is how long a poll waits for new work (default 10 s).
	PollWait time.Duration
	// DrainTimeout is how long Run, once its context is done, lets the
	// lease starts and stops in flight go on (default DefaultDrainTimeout):
	// a stop whose final checkpoint and commit did not finish by then is
	// left whole on disk for the next agent; a teardown once begun always
	// runs to its end.
	DrainTimeout time.Duration
	Logger       *slog.Logger
}

// Egress is an agent's egress plumbing: one broker for all its leases, and
// the options of their network namespaces.
type Egress struct {
	Broker  *egress.Broker
	Network egress.NetworkOptions
}

// DefaultDrainTimeout is Config.DrainTimeout's default: within `bothy
// serve`'s 10 s for requests to finish, with time left to answer them.
const DefaultDrainTimeout = 7 * time.Second

// Agent runs leases for a control plane.
type Agent struct {
	cfg Config
	log *slog.Logger
	// ops counts the lease starts, stops and teardowns in flight, which
	// Run lets finish (Config.DrainTimeout).
	ops sync.WaitGroup

	mu      sync.Mutex
	leases  map[string]*lease
	version int64
	// polls counts the polls sent; gone holds the leases torn down, by
	// id, until an answer to a poll sent after the teardown omits them.
	polls int64
	gone  map[string]*tombstone
}

// tombstone is a lease the agent tore down. A poll sent before the
// control plane heard of the release is answered from the state before
// it, which still lists the lease: the tombstone keeps that stale answer
// from starting the lease again. An answer to a poll sent after the
// teardown that still lists it means the control plane did not hear of
// the release (the report was lost), and gets the report again, with the
// answer's fresh credential.
type tombstone struct {
	generation int64
	poll       int64 // polls when the lease was torn down
	report     *runtime.ReleaseRequest
	reporting  bool // a repeated report is out
}

// New returns an agent; Run runs it.
func New(cfg Config) (*Agent, error) {
	if cfg.ID == "" || cfg.Dir == "" || cfg.Control == nil || cfg.Blobs == nil || cfg.Cache == nil || len(cfg.SupervisorCommand) == 0 {
		return nil, errors.New("agent: ID, Dir, Control, Blobs, Cache and SupervisorCommand are required")
	}
	mode, err := hostcache.ParseMode(string(cfg.Workspace))
	if err != nil {
		return nil, err
	}
	cfg.Workspace = mode
	if cfg.PollWait <= 0 {
		cfg.PollWait = 10 * time.Second
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "leases"), 0o700); err != nil {
		return nil, err
	}
	return &Agent{cfg: cfg, log: cfg.Logger.With("agent", cfg.ID), leases: map[string]*lease{}, gone: map[string]*tombstone{}}, nil
}

// Run loads the leases left on disk by an earlier process, then polls the
// control plane and acts on its answers until ctx is done. Leases keep
// running when Run returns: their supervisors outlive the agent, and the
// next agent on the same directory takes them over.
//
// Lease work does not run under ctx: once ctx is done Run polls no more,
// and lets the starts, stops and teardowns in flight go on for
// Config.DrainTimeout (drain), so that a stop asked for just before a
// SIGTERM checkpoints, commits and reports its release.
func (a *Agent) Run(ctx context.Context) error {
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	defer a.drain(cancelWork)
	a.recover(work)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		a.mu.Lock()
		a.polls++
		poll := a.polls
		a.mu.Unlock()
		resp, err := a.cfg.Control.Poll(ctx, a.token(), &runtime.PollRequest{
			AgentID: a.cfg.ID, Leases: a.held(), Version: a.version, Wait: a.cfg.PollWait,
		})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			a.log.Warn("poll failed", "err", err)
			sleep(ctx, backoff)
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		a.version = resp.Version
		a.apply(work, resp, poll)
	}
	a.lastStops(work)
	return nil
}

// lastStops polls once more, without waiting, when Run's context is done,
// and starts the stops it asks for (and nothing else): a stop requested
// just before the signal, whose answer the poll that the signal cut
// would have carried, gets the drain too.
func (a *Agent) lastStops(work context.Context) {
	ctx, cancel := context.WithTimeout(work, time.Second)
	defer cancel()
	resp, err := a.cfg.Control.Poll(ctx, a.token(), &runtime.PollRequest{AgentID: a.cfg.ID, Leases: a.held(), Version: a.version})
	if err != nil {
		return
	}
	for _, w := range resp.Leases {
		a.mu.Lock()
		l := a.leases[w.LeaseID]
		a.mu.Unlock()
		if l == nil || !w.Stop {
			continue
		}
		l.mu.Lock()
		ready := l.state == leaseReady
		l.mu.Unlock()
		if ready {
			l.update(work, w)
		}
	}
}

// drain waits for the lease operations in flight, for Config.DrainTimeout;
// then it cancels their context (cancelWork), which leaves a stop not yet
// committed whole on disk, and waits for the teardowns that began.
func (a *Agent) drain(cancelWork context.CancelFunc) {
	done := make(chan struct{})
	go func() { a.ops.Wait(); close(done) }()
	t := time.NewTimer(a.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	a.log.Warn("lease operations still in flight at the drain deadline; leaving the stops not yet committed to the next start", "timeout", a.cfg.DrainTimeout)
	cancelWork()
	<-done
}

// goOp runs fn, a lease operation that drain waits for, in a goroutine.
func (a *Agent) goOp(fn func()) {
	a.ops.Add(1)
	go func() {
		defer a.ops.Done()
		fn()
	}()
}

// held lists the leases the agent holds: every lease an answer listed that
// is not torn down yet, started or not, and those found on disk. A lease
// not ready yet is Starting: it drops commands until it is (lease.update),
// so the control plane must send it none.
func (a *Agent) held() []runtime.HeldLease {
	a.mu.Lock()
	leases := make([]*lease, 0, len(a.leases))
	for _, l := range a.leases {
		leases = append(leases, l)
	}
	a.mu.Unlock()
	out := []runtime.HeldLease{}
	for _, l := range leases {
		l.mu.Lock()
		starting := l.state == leaseNew || l.state == leaseRecovered || l.state == leaseStarting
		l.mu.Unlock()
		out = append(out, runtime.HeldLease{LeaseID: l.rec.LeaseID, TenantID: l.rec.TenantID, Generation: l.rec.Generation, Starting: starting})
	}
	return out
}

// apply acts on the answer to the agent's poll'th poll: leases listed are
// started or updated, leases held but not listed were released by the
// control plane and are torn down. A lease the agent tore down is never
// started again (see tombstone).
func (a *Agent) apply(ctx context.Context, resp *runtime.PollResponse, poll int64) {
	listed := map[string]bool{}
	for _, w := range resp.Leases {
		listed[w.LeaseID] = true
		a.mu.Lock()
		if ts := a.gone[w.LeaseID]; ts != nil && w.Generation <= ts.generation {
			again := ts.poll < poll && !ts.reporting
			ts.reporting = ts.reporting || again
			a.mu.Unlock()
			if again {
				go a.reportAgain(ctx, w, ts)
			}
			continue
		}
		l, ok := a.leases[w.LeaseID]
		if !ok {
			l = newLease(a, w)
			a.leases[w.LeaseID] = l
		}
		a.mu.Unlock()
		l.update(ctx, w)
	}
	a.mu.Lock()
	var gone []*lease
	for id, l := range a.leases {
		if !listed[id] {
			gone = append(gone, l)
		}
	}
	for id, ts := range a.gone {
		// The control plane answered a poll sent after the teardown
		// without the lease: it holds it no more, and never lists it
		// again (it adopts only leases an agent holds).
		if ts.poll < poll && !listed[id] {
			delete(a.gone, id)
		}
	}
	a.mu.Unlock()
	for _, l := range gone {
		l.abandon(ctx)
	}
}

// forget drops a lease torn down, which report was reported released
// (or was not, if it had no credential), leaving its tombstone.
func (a *Agent) forget(id string, generation int64, report *runtime.ReleaseRequest) {
	a.mu.Lock()
	delete(a.leases, id)
	a.gone[id] = &tombstone{generation: generation, poll: a.polls, report: report}
	a.mu.Unlock()
}

// reportAgain reports a lease torn down released again, with the
// credential of an answer that still lists it.
func (a *Agent) reportAgain(ctx context.Context, w *runtime.LeaseWork, ts *tombstone) {
	err := a.cfg.Control.Released(ctx, w.Credential, ts.report)
	a.mu.Lock()
	ts.reporting = false
	a.mu.Unlock()
	if err != nil {
		a.log.Warn("report lease released again", "lease", w.LeaseID, "err", err)
		return
	}
	a.log.Info("lease reported released again: the control plane still listed it", "lease", w.LeaseID, "disposition", ts.report.Disposition)
}

// token returns the token to poll with.
func (a *Agent) token() string {
	if a.cfg.TokenSource != nil {
		return a.cfg.TokenSource()
	}
	return a.cfg.Token
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
