package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/hostcache"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/supervisor"
)

// teardownTimeout bounds a teardown, and supervisorGoneTimeout each wait
// in it for the lease's supervisor to end (variables for the tests).
var (
	teardownTimeout       = 2 * time.Minute
	supervisorGoneTimeout = 30 * time.Second
)

// Lease states in the agent.
const (
	leaseNew       = "new"       // seen in a poll answer, not started
	leaseRecovered = "recovered" // found on disk after a restart, not resumed
	leaseStarting  = "starting"
	leaseReady     = "ready"
	leaseStopping  = "stopping"
	leaseGone      = "gone"
)

// record is what the agent keeps on disk of a lease, in lease.json, so that
// a restarted agent can take the lease over.
type record struct {
	LeaseID    string `json:"lease_id"`
	TenantID   string `json:"tenant_id"`
	ComputerID string `json:"computer_id"`
	Generation int64  `json:"generation"`
	Provider   string `json:"provider"`
	// The base revision: the read-only lower layer of the overlay.
	BaseRevision int64    `json:"base_revision"`
	BaseRoot     string   `json:"base_root"`
	BasePacks    []string `json:"base_packs"`
	BaseSize     int64    `json:"base_size"`
	BaseFiles    int64    `json:"base_files"`
	Lower        string   `json:"lower"`
	// Workspace is how the workspace was materialized ("" = overlay).
	Workspace hostcache.Mode  `json:"workspace,omitempty"`
	Handle    json.RawMessage `json:"handle,omitempty"`
	// Egress is the lease's egress policy; a mode other than none means
	// the lease has a network namespace and a broker listener to remove.
	Egress bothy.EgressPolicy `json:"egress"`
	// Quarantined is why the lease was quarantined with its writable
	// layer kept (its final checkpoint failed): such a lease is never
	// started again. The next agent reports it quarantined again if the
	// control plane still lists it (the report was lost), and removes its
	// layers once it does not.
	Quarantined string `json:"quarantined,omitempty"`
}

// workspaceAt is the workspace of the record's mode under the lease
// directory dir, for removing one that this process did not materialize.
func (r *record) workspaceAt(dir string) hostcache.Workspace {
	if r.Workspace == hostcache.ModeCopy {
		return &hostcache.Copy{Dir: filepath.Join(dir, "ws")}
	}
	return &hostcache.Overlay{Merged: filepath.Join(dir, "ws", "merged")}
}

type lease struct {
	a   *Agent
	dir string

	mu        sync.Mutex
	rec       record
	work      *runtime.LeaseWork // the newest desired state, with a fresh credential
	state     string
	abandoned bool
	died      bool // its sandbox died under it (lost)
	ws        hostcache.Workspace
	h         *bothy.SandboxHandle
	sup       *supervisor.Client
	// supNew is closed, and replaced, when the watcher gives the lease a
	// new supervisor (watchSupervisor); supPoke asks the watcher to check
	// now; supDead says the supervisor died and could not be replaced.
	supNew  chan struct{}
	supPoke chan struct{}
	supDead bool
	// tearing is set, under supMu, when the teardown begins: the watcher
	// replaces no supervisor after it. supMu is held while one is replaced.
	tearing   bool
	supMu     sync.Mutex
	repo      *checkpoint.Repo
	base      *checkpoint.Snapshot
	parent    *checkpoint.Snapshot // the newest committed snapshot of this lease
	revision  int64                // the computer's revision: the base of the next commit
	ckptDone  int64
	ckptBusy  bool
	inflight  map[string]bool                 // command ids with a run or status call in flight, or refused
	held      map[string]*runtime.CommandWork // runs that arrived while their command was in flight
	applying  map[int64]bool                  // files-API changes being applied
	cancelled map[string]bool
	pumps     map[string]bool
	pumpWG    sync.WaitGroup
	// netStart holds the broker's byte count of the lease when each
	// running command started.
	netStart map[string]int64

	ckptMu sync.Mutex // one checkpoint at a time
}

func newLease(a *Agent, w *runtime.LeaseWork) *lease {
	return &lease{
		a: a, dir: filepath.Join(a.cfg.Dir, "leases", w.LeaseID), state: leaseNew,
		rec:      record{LeaseID: w.LeaseID, TenantID: w.TenantID, ComputerID: w.ComputerID, Generation: w.Generation, Provider: w.Provider},
		inflight: map[string]bool{}, held: map[string]*runtime.CommandWork{}, cancelled: map[string]bool{}, pumps: map[string]bool{}, applying: map[int64]bool{},
		netStart: map[string]int64{}, supNew: make(chan struct{}), supPoke: make(chan struct{}, 1),
	}
}

// cred is the lease's credential, from the newest answer that listed it;
// "" for a lease rebuilt from disk that no answer listed.
func (l *lease) cred() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.work == nil {
		return ""
	}
	return l.work.Credential
}

// update acts on the lease's desired state.
func (l *lease) update(ctx context.Context, w *runtime.LeaseWork) {
	l.mu.Lock()
	l.work = w
	state := l.state
	switch {
	case state == leaseRecovered && l.rec.Quarantined != "":
		l.state = leaseStopping
	case state == leaseNew || state == leaseRecovered:
		l.state = leaseStarting
	case state == leaseReady:
		if w.Stop {
			l.state = leaseStopping
		}
	}
	ckpt := w.Checkpoint > l.ckptDone && !l.ckptBusy && state == leaseReady && !w.Stop
	if ckpt {
		l.ckptBusy = true
	}
	l.mu.Unlock()
	if state == leaseStopping || state == leaseGone {
		// A command sent to run while the lease tears down is refused
		// (command, refuse): it never reached the supervisor.
		for _, cw := range w.Commands {
			if cw.Action == runtime.ActRun {
				l.command(ctx, cw)
			}
		}
	}
	switch state {
	case leaseNew:
		l.a.goOp(func() { l.start(ctx, false) })
	case leaseRecovered:
		if why := l.rec.Quarantined; why != "" {
			// Never mounted again: its sandbox and uid are gone, and its
			// writable layer holds what no checkpoint committed.
			l.a.log.Warn("a quarantined lease is still listed; reporting it quarantined again", "lease", l.rec.LeaseID)
			l.a.goOp(func() { l.teardown(ctx, bothy.LeaseQuarantined, why, true) })
			return
		}
		l.a.goOp(func() { l.start(ctx, true) })
	case leaseReady:
		if w.Stop {
			l.a.goOp(func() { l.stop(ctx) })
			return
		}
		if ckpt {
			go l.checkpointNow(ctx, w.Checkpoint)
		}
		for _, aw := range w.Applies {
			l.mu.Lock()
			busy := l.applying[aw.ID]
			l.applying[aw.ID] = true
			l.mu.Unlock()
			if !busy {
				go l.applyNow(ctx, aw)
			}
		}
		for _, cw := range w.Commands {
			l.command(ctx, cw)
		}
	}
}

// start prepares the lease's workspace and sandbox and spawns its
// supervisor; resume takes over one that an earlier agent process
// started, reusing whatever of it still stands.
func (l *lease) start(ctx context.Context, resume bool) {
	err := l.prepare(ctx, resume)
	l.mu.Lock()
	abandoned := l.abandoned
	if err == nil && !abandoned {
		l.state = leaseReady
	}
	l.mu.Unlock()
	if err != nil && ctx.Err() != nil {
		// The agent is stopping (drain): the next one starts it again.
		l.a.log.Warn("lease start cut by the agent's stop; the next start resumes it", "lease", l.rec.LeaseID, "err", err)
		return
	} else if err != nil {
		l.a.log.Error("lease start failed", "lease", l.rec.LeaseID, "err", err)
		l.teardown(ctx, bothy.LeaseFailed, err.Error(), false)
		return
	}
	if abandoned {
		l.teardown(ctx, bothy.LeaseReleased, "", false)
		return
	}
	l.mu.Lock()
	scratch := l.work.Limits.ScratchBytes
	l.mu.Unlock()
	if scratch > 0 {
		go l.watchScratch(ctx, scratch, cancelDiskLimited)
	}
	go l.watchSupervisor(ctx)
	host, _ := os.Hostname()
	ref, _ := l.h.Encode()
	if err := l.a.cfg.Control.Ready(ctx, l.cred(), &runtime.ReadyRequest{Host: host, SandboxRef: string(ref)}); err != nil {
		l.a.log.Warn("report lease ready", "lease", l.rec.LeaseID, "err", err)
	}
	l.a.log.Info("lease ready", "lease", l.rec.LeaseID, "computer", l.rec.ComputerID, "resumed", resume)
}

func (l *lease) prepare(ctx context.Context, resume bool) error {
	l.mu.Lock()
	w := l.work
	l.mu.Unlock()
	repo, err := checkpoint.NewRepo(l.a.cfg.Blobs, w.TenantID, w.HashKey)
	if err != nil {
		return err
	}
	if !resume {
		l.rec.BaseRevision, l.rec.BaseRoot, l.rec.BasePacks = w.Revision, w.RootDigest, w.Packs
		l.rec.BaseSize, l.rec.BaseFiles = w.Size, w.FileCount
		l.rec.Egress = w.Egress
	}
	base, err := repo.Open(ctx, l.rec.BaseRoot, l.rec.BasePacks)
	if err != nil {
		return fmt.Errorf("open base revision: %w", err)
	}
	parent := base
	if resume && w.Revision != l.rec.BaseRevision {
		if parent, err = repo.Open(ctx, w.RootDigest, w.Packs); err != nil {
			return fmt.Errorf("open current revision: %w", err)
		}
	}
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return err
	}
	if !resume {
		l.rec.Workspace = l.a.cfg.Workspace
	}
	prov := l.a.cfg.Providers[l.rec.Provider]
	if prov == nil {
		return bothy.Errorf(bothy.EINVALID, "provider %q is not enabled on this agent", l.rec.Provider)
	}
	ws, err := l.workspace(ctx, w, prov, base, resume)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.ws, l.repo, l.base, l.parent, l.revision = ws, repo, base, parent, w.Revision
	l.mu.Unlock()
	spec := bothy.LeaseSpec{LeaseID: w.LeaseID, ComputerID: w.ComputerID, Generation: w.Generation,
		Workspace: ws.Path(), Limits: w.Limits}
	if err := l.network(ctx, &spec); err != nil {
		return err
	}
	supDir := filepath.Join(l.dir, "sup")
	var h *bothy.SandboxHandle
	if len(l.rec.Handle) > 0 {
		h, err = prov.Recover(ctx, l.rec.Handle)
	} else {
		h, err = prov.Start(ctx, spec)
		if err == nil {
			l.rec.Handle, _ = h.Encode()
			if err = l.save(); err == nil {
				err = supervisor.Init(supDir, h)
			}
		}
	}
	l.mu.Lock()
	l.h = h
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("start sandbox: %w", err)
	}
	sup, err := supervisor.Dial(ctx, supervisor.SocketPath(supDir))
	if err != nil {
		// No supervisor answers (a new lease, or it died with the host):
		// start one. A restarted supervisor marks the commands that were
		// running as lost, and never runs them again.
		cmd := l.a.cfg.SupervisorCommand
		if _, _, err := supervisor.Spawn(ctx, cmd[0], cmd[1:], supDir); err != nil {
			return fmt.Errorf("spawn supervisor: %w", err)
		}
		if sup, err = supervisor.Dial(ctx, supervisor.SocketPath(supDir)); err != nil {
			return fmt.Errorf("dial supervisor: %w", err)
		}
	}
	l.mu.Lock()
	l.sup = sup
	l.mu.Unlock()
	return nil
}

// workspace materializes the lease's base revision as its record's mode
// says, or takes over the workspace an earlier agent process left.
func (l *lease) workspace(ctx context.Context, w *runtime.LeaseWork, prov bothy.Provider, base *checkpoint.Snapshot, resume bool) (hostcache.Workspace, error) {
	wsDir := filepath.Join(l.dir, "ws")
	if l.rec.Workspace == hostcache.ModeCopy {
		// A provider that runs the lease as a uid of its own isolates it,
		// and the plain scan of a copy is not safe against a sandbox
		// (hostcache.Copy): such a provider gets an overlay.
		if _, ok := prov.(bothy.WorkspaceOwner); ok {
			return nil, bothy.Errorf(bothy.EINVALID, "provider %q isolates its sandboxes, which need an overlay workspace, not a copy", l.rec.Provider)
		}
		if err := l.save(); err != nil {
			return nil, err
		}
		return hostcache.CopyIn(ctx, base, wsDir)
	}
	var err error
	if !resume || l.rec.Lower == "" {
		if l.rec.Lower, err = l.a.cfg.Cache.Materialize(ctx, w.TenantID, base); err != nil {
			return nil, fmt.Errorf("materialize base revision: %w", err)
		}
		if err := l.save(); err != nil {
			return nil, err
		}
	}
	opts := hostcache.MountOptions{RedirectDir: true, Volatile: true}
	// A provider that names the lease's uid now gets a workspace that
	// already appears owned by it (an idmapped lower layer), so its Start
	// chowns nothing and nothing is copied up until it is written.
	if wo, ok := prov.(bothy.WorkspaceOwner); ok {
		if opts.IDMapUID, err = wo.WorkspaceUID(ctx, w.LeaseID); err != nil {
			return nil, fmt.Errorf("workspace uid: %w", err)
		}
	}
	ov, err := hostcache.Mount(ctx, l.rec.Lower, wsDir, opts)
	if err != nil {
		return nil, err
	}
	if ov.IDMapErr != nil {
		l.a.log.Warn("idmapped workspace refused; the provider will chown it", "lease", l.rec.LeaseID, "err", ov.IDMapErr)
	}
	return ov, nil
}

// save writes lease.json atomically.
func (l *lease) save() error {
	b, err := json.Marshal(l.rec)
	if err != nil {
		return err
	}
	tmp := filepath.Join(l.dir, "lease.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(l.dir, "lease.json"))
}

// recover loads the leases an earlier agent process left on disk; the
// first poll reports them, and the answer resumes or releases each.
func (a *Agent) recover(ctx context.Context) {
	dirs, err := os.ReadDir(filepath.Join(a.cfg.Dir, "leases"))
	if err != nil {
		a.log.Warn("list leases on disk", "err", err)
		return
	}
	for _, d := range dirs {
		dir := filepath.Join(a.cfg.Dir, "leases", d.Name())
		b, err := os.ReadFile(filepath.Join(dir, "lease.json"))
		var rec record
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil || rec.LeaseID != d.Name() {
			a.log.Warn("lease directory without a readable record; removing its layers", "dir", dir, "err", err)
			// Its mode is unknown: an overlay's removal, then a copy's,
			// which never deletes through what is still mounted.
			oerr := (&hostcache.Overlay{Merged: filepath.Join(dir, "ws", "merged")}).Remove(ctx)
			cerr := (&hostcache.Copy{Dir: filepath.Join(dir, "ws")}).Remove(ctx)
			if err := errors.Join(oerr, cerr); err != nil {
				a.log.Error("lease directory without a record still holds what cannot be removed; leaving it", "dir", dir, "err", err)
				continue
			}
			os.RemoveAll(dir)
			continue
		}
		l := &lease{a: a, dir: dir, rec: rec, state: leaseRecovered,
			inflight: map[string]bool{}, held: map[string]*runtime.CommandWork{}, cancelled: map[string]bool{}, pumps: map[string]bool{}, applying: map[int64]bool{},
			netStart: map[string]int64{}, supNew: make(chan struct{}), supPoke: make(chan struct{}, 1)}
		a.leases[rec.LeaseID] = l
		a.log.Info("found lease on disk", "lease", rec.LeaseID, "computer", rec.ComputerID)
	}
}

// checkpoint commits the workspace if it changed since the lease's last
// commit and returns the computer's revision.
func (l *lease) checkpoint(ctx context.Context) (int64, error) {
	rev, _, err := l.checkpointWritten(ctx)
	return rev, err
}

// checkpointWritten is checkpoint, also returning the bytes of the files
// it found created or changed since the last checkpoint.
func (l *lease) checkpointWritten(ctx context.Context) (int64, int64, error) {
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	return l.checkpointLocked(ctx)
}

// checkpointLocked is checkpointWritten with ckptMu held.
func (l *lease) checkpointLocked(ctx context.Context) (int64, int64, error) {
	l.mu.Lock()
	ws, base, parent, rev, repo := l.ws, l.base, l.parent, l.revision, l.repo
	l.mu.Unlock()
	if ws == nil {
		return rev, 0, errors.New("lease has no workspace")
	}
	res, err := ws.Checkpoint(ctx, base, hostcache.CheckpointOptions{Parent: parent, BaseSize: l.rec.BaseSize, BaseFileCount: l.rec.BaseFiles})
	if err != nil {
		return rev, 0, fmt.Errorf("checkpoint: %w", err)
	}
	written := res.Stats.BytesRead
	if res.Root == parent.Root() {
		return rev, written, nil
	}
	got, err := l.a.cfg.Control.Commit(ctx, l.cred(), &runtime.CommitRequest{
		Base: rev, RootDigest: res.Root.String(), Packs: res.Packs, Size: res.Size, FileCount: res.FileCount})
	if err != nil {
		return rev, written, fmt.Errorf("commit: %w", err)
	}
	snap, err := repo.Open(ctx, res.Root.String(), res.Packs)
	if err != nil {
		return got.Number, written, err
	}
	l.mu.Lock()
	l.parent, l.revision = snap, got.Number
	l.mu.Unlock()
	return got.Number, written, nil
}

// checkpointNow answers a checkpoint request of the control plane.
func (l *lease) checkpointNow(ctx context.Context, n int64) {
	rev, err := l.checkpoint(ctx)
	req := &runtime.CheckpointedRequest{Checkpoint: n, Revision: rev}
	if err != nil {
		req.Error = err.Error()
	}
	if err := l.a.cfg.Control.Checkpointed(ctx, l.cred(), req); err != nil {
		l.a.log.Warn("report checkpoint", "lease", l.rec.LeaseID, "err", err)
	}
	l.mu.Lock()
	l.ckptBusy = false
	if n > l.ckptDone {
		l.ckptDone = n
	}
	l.mu.Unlock()
}

// stop is an orderly stop: running commands are cancelled and their
// output delivered, the workspace is checkpointed, and the sandbox torn
// down.
func (l *lease) stop(ctx context.Context) {
	l.mu.Lock()
	sup := l.sup
	var running []string
	for id := range l.pumps {
		running = append(running, id)
	}
	l.mu.Unlock()
	for _, id := range running {
		if _, err := sup.Cancel(ctx, id); err != nil {
			l.a.log.Warn("cancel command at stop", "command", id, "err", err)
		}
	}
	done := make(chan struct{})
	go func() { l.pumpWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(time.Minute):
		l.a.log.Warn("command streams did not end within a minute of stop", "lease", l.rec.LeaseID)
	}
	var err error
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		if _, err = l.checkpoint(ctx); err == nil {
			break
		}
	}
	if ctx.Err() != nil {
		// The agent stopped (its drain deadline passed) before the final
		// checkpoint was committed: the lease stays whole on disk, its
		// supervisor and sandbox running, and the next agent resumes it
		// and stops it again (the computer is still stopping).
		l.a.log.Warn("the agent stopped before the lease's stop was committed; leaving it whole for the next start", "lease", l.rec.LeaseID, "err", err)
		return
	}
	if err != nil {
		// The writable layer holds work not yet committed: keep it.
		l.a.log.Error("final checkpoint failed; quarantining the lease with its layers kept", "lease", l.rec.LeaseID, "err", err)
		l.teardown(ctx, bothy.LeaseQuarantined, "final checkpoint failed: "+err.Error(), true)
		return
	}
	l.teardown(ctx, bothy.LeaseReleased, "", false)
}

// abandon tears down a lease the control plane no longer lists: it was
// released or declared lost there, so nothing of it may be committed.
func (l *lease) abandon(ctx context.Context) {
	l.mu.Lock()
	state := l.state
	l.abandoned = true
	if state == leaseReady || state == leaseRecovered || state == leaseNew {
		l.state = leaseStopping
	}
	l.mu.Unlock()
	switch state {
	case leaseReady, leaseRecovered, leaseNew:
		l.a.log.Warn("the control plane no longer lists the lease; tearing it down", "lease", l.rec.LeaseID)
		l.a.goOp(func() { l.teardown(ctx, bothy.LeaseReleased, "", false) })
	}
}

// teardown stops the supervisor and the sandbox, removes the workspace
// layers (unless keep) and the lease directory, and reports the lease
// released with the residue found. It needs nothing that this process
// set up: a lease rebuilt from disk, or one whose start failed part way,
// is found through its directory (the supervisor's socket, the sandbox
// handle in lease.json, the workspace of its record's mode), and what
// cannot be stopped is residue.
//
// Once begun it runs to its end, whatever ctx (the agent's stop does not
// cut it half way), bounded by teardownTimeout. It never removes the
// directory of a lease whose supervisor still runs, or whose sandbox's
// cgroups still hold processes: that is residue, and the directory is
// kept for the next agent to tear down again.
func (l *lease) teardown(ctx context.Context, disposition, reason string, keep bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	l.supMu.Lock() // after a replacement of the supervisor under way
	l.mu.Lock()
	l.tearing = true
	sup, h, ws := l.sup, l.h, l.ws
	l.mu.Unlock()
	l.supMu.Unlock()
	if keep && l.rec.Quarantined == "" {
		// Marked before anything is stopped: a lease whose sandbox is
		// gone must never be resumed over its kept layer.
		l.mu.Lock()
		l.rec.Quarantined = cmp.Or(reason, "quarantined")
		l.mu.Unlock()
		if err := l.save(); err != nil {
			l.a.log.Warn("mark the lease quarantined on disk", "lease", l.rec.LeaseID, "err", err)
		}
	}
	residue := &bothy.Residue{}
	supDir := filepath.Join(l.dir, "sup")
	if sup == nil {
		// A supervisor that an earlier agent process spawned still serves
		// on its socket; none answers if none runs, or if its socket is
		// gone, when it still holds its directory and is signalled.
		if c, err := supervisor.Dial(ctx, supervisor.SocketPath(supDir)); err == nil {
			sup = c
		} else if signalled, err := supervisor.Terminate(supDir); signalled {
			l.a.log.Warn("the supervisor does not answer on its socket; sent it SIGTERM", "lease", l.rec.LeaseID)
		} else if err != nil {
			l.a.log.Warn("stop the supervisor", "lease", l.rec.LeaseID, "err", err)
		}
	}
	if sup != nil {
		if err := sup.Shutdown(ctx); err != nil {
			l.a.log.Warn("shut the supervisor down", "lease", l.rec.LeaseID, "err", err)
		}
		sup.Close()
	}
	supGone := true
	if err := supervisor.WaitGone(ctx, supDir, supervisorGoneTimeout); err != nil {
		// Shutdown did not end it: SIGTERM, as for one that does not
		// answer, then wait once more.
		if signalled, terr := supervisor.Terminate(supDir); signalled {
			l.a.log.Warn("the supervisor did not end at shutdown; sent it SIGTERM", "lease", l.rec.LeaseID, "err", err)
			err = supervisor.WaitGone(ctx, supDir, supervisorGoneTimeout)
		} else if terr != nil {
			l.a.log.Warn("stop the supervisor", "lease", l.rec.LeaseID, "err", terr)
		}
		if err != nil {
			supGone = false
			residue.Other = append(residue.Other, "supervisor: "+err.Error())
		}
	}
	prov := l.a.cfg.Providers[l.rec.Provider]
	if h == nil && len(l.rec.Handle) > 0 {
		// Stop takes the recorded handle even of a sandbox that is partly
		// gone: it undoes whatever of it remains.
		var err error
		if h, err = bothy.DecodeSandboxHandle(l.rec.Handle, l.rec.Provider); err != nil {
			residue.Other = append(residue.Other, "sandbox handle: "+err.Error())
		} else if prov == nil {
			residue.Other = append(residue.Other, fmt.Sprintf("sandbox: provider %q is not enabled on this agent to stop it", l.rec.Provider))
		}
	}
	var usage *bothy.Usage
	if h != nil {
		if prov != nil {
			if m, ok := prov.(bothy.LeaseMeter); ok {
				if u, err := m.LeaseUsage(ctx, h); err == nil {
					usage = &u
				} else {
					l.a.log.Warn("lease usage", "lease", l.rec.LeaseID, "err", err)
				}
			}
			r, err := prov.Stop(ctx, h)
			if r != nil {
				r.Other = append(r.Other, residue.Other...)
				residue = r
			}
			if err != nil {
				residue.Other = append(residue.Other, "provider stop: "+err.Error())
			}
		}
	}
	residue.Other = append(residue.Other, l.removeNetwork(ctx)...)
	if !keep && (!supGone || len(residue.Cgroups) > 0) {
		// Its processes may still run in the directory: removing it would
		// leave them running in a deleted directory, out of any agent's
		// sight. The next agent finds it and tears it down again.
		l.a.log.Error("the lease's processes may still run; keeping its directory", "lease", l.rec.LeaseID, "supervisor_gone", supGone, "cgroups", residue.Cgroups)
		residue.Paths = append(residue.Paths, l.dir)
	} else if !keep {
		if ws == nil {
			ws = l.rec.workspaceAt(l.dir)
		}
		if err := ws.Remove(ctx); err != nil {
			if _, ok := ws.(*hostcache.Overlay); ok {
				residue.Mounts = append(residue.Mounts, ws.Path())
			} else {
				residue.Paths = append(residue.Paths, ws.Path())
			}
		}
		os.RemoveAll(l.dir)
		if _, err := os.Lstat(l.dir); err == nil {
			residue.Paths = append(residue.Paths, l.dir)
		}
	} else {
		residue.Other = append(residue.Other, "writable layer kept at "+l.dir)
	}
	if !residue.Empty() && disposition == bothy.LeaseReleased {
		disposition = bothy.LeaseQuarantined
	}
	ev := ""
	if !residue.Empty() {
		b, _ := json.Marshal(residue)
		ev = string(b)
	}
	l.mu.Lock()
	l.state = leaseGone
	l.mu.Unlock()
	report := &runtime.ReleaseRequest{Disposition: disposition, Residue: ev, Error: reason, Usage: usage}
	// A lease rebuilt from disk that no answer listed has no credential:
	// the control plane released it already, and there is no one to tell.
	if cred := l.cred(); cred != "" {
		if err := l.a.cfg.Control.Released(ctx, cred, report); err != nil {
			l.a.log.Warn("report lease released", "lease", l.rec.LeaseID, "err", err)
		}
	}
	l.a.forget(l.rec.LeaseID, l.rec.Generation, report)
	l.a.log.Info("lease torn down", "lease", l.rec.LeaseID, "disposition", disposition, "residue", ev)
}
