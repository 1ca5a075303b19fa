package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/supervisor"
)

// Bounds of one batch of events sent to the control plane.
const (
	batchEvents = 64
	batchBytes  = 256 << 10
)

// command acts on one command action of a poll answer. Every action is
// idempotent: run goes to the supervisor, which starts nothing for an id it
// journaled already, and a stream is attached once per command.
func (l *lease) command(ctx context.Context, cw *runtime.CommandWork) {
	switch cw.Action {
	case runtime.ActRun, runtime.ActStatus:
		l.begin(ctx, cw)
	case runtime.ActAttach:
		l.attach(ctx, cw.CommandID, cw.AfterSeq)
	case runtime.ActCancel:
		l.cancel(ctx, cw.CommandID)
	}
}

// begin starts a run or status action in a goroutine of its own; a
// command has one in flight at a time. A status that arrives meanwhile is
// dropped: the control plane asks again in its next answer. A run is sent
// only once, and it can arrive while a status action is still reporting
// the command never_seen (the control plane dispatches it once more at
// that report; the status action must stay in flight while it reports, or
// a second one could report never_seen of the new dispatch): it is held,
// and done takes it up. A run is refused while the lease tears down.
func (l *lease) begin(ctx context.Context, cw *runtime.CommandWork) {
	id := cw.CommandID
	l.mu.Lock()
	if l.inflight[id] {
		if cw.Action == runtime.ActRun {
			l.held[id] = cw
		}
		l.mu.Unlock()
		return
	}
	l.inflight[id] = true
	sup, ready := l.sup, l.state == leaseReady
	l.mu.Unlock()
	switch {
	case cw.Action == runtime.ActStatus:
		go l.status(ctx, sup, cw)
	case ready:
		go l.run(ctx, sup, cw)
	default:
		go l.refuse(ctx, id)
	}
}

// cancel asks the supervisor to kill a command, once unless that fails.
func (l *lease) cancel(ctx context.Context, id string) {
	l.mu.Lock()
	sup, again := l.sup, l.cancelled[id]
	l.cancelled[id] = true
	l.mu.Unlock()
	if again {
		return
	}
	go func() {
		if _, err := sup.Cancel(ctx, id); err != nil {
			l.a.log.Warn("cancel command", "command", id, "err", err)
			l.pokeSupervisor()
			l.mu.Lock()
			delete(l.cancelled, id)
			l.mu.Unlock()
		}
	}()
}

// run passes a run action to the supervisor and attaches its stream.
func (l *lease) run(ctx context.Context, sup *supervisor.Client, cw *runtime.CommandWork) {
	id := cw.CommandID
	defer l.done(ctx, id)
	if cw.Spec == nil {
		return
	}
	if l.a.cfg.Egress != nil {
		n := l.netBytes()
		l.mu.Lock()
		l.netStart[id] = n
		l.mu.Unlock()
	}
	defer func() {
		// A run the supervisor refused never ends through end().
		l.mu.Lock()
		if _, ok := l.pumps[id]; !ok {
			delete(l.netStart, id)
		}
		l.mu.Unlock()
	}()
	if reason, gone := l.sandboxGone(ctx); gone {
		// The sandbox died before the run reached the supervisor:
		// nothing of the command was journaled or started, so it may run
		// on the next lease. Reported while the lease's credential still
		// counts, before the lease is released as lost.
		l.refuse(ctx, id)
		l.lost(ctx, "the sandbox is gone: "+reason)
		return
	}
	st, err := sup.Run(ctx, id, *cw.Spec)
	if err != nil {
		// The supervisor refused it (a bad cwd, say) or could not
		// be reached; in the second case the control plane asks
		// about the command after its acknowledgement timeout.
		l.a.log.Warn("run command", "command", id, "err", err)
		l.pokeSupervisor()
		if code := bothy.ErrorCode(err); code == bothy.EINVALID || code == bothy.EINVALIDPATH || code == bothy.ETOOLARGE {
			l.report(ctx, id, &runtime.Report{State: bothy.RunRunning})
			l.report(ctx, id, &runtime.Report{State: bothy.RunFailed, Error: bothy.ErrorMessage(err)})
		}
		return
	}
	l.report(ctx, id, &runtime.Report{State: bothy.RunRunning, LastSeq: st.LastSeq})
	l.attach(ctx, id, 0)
}

// status reports what the supervisor knows of a command and attaches the
// stream of one that runs.
func (l *lease) status(ctx context.Context, sup *supervisor.Client, cw *runtime.CommandWork) {
	id := cw.CommandID
	defer l.done(ctx, id)
	st, err := sup.Status(ctx, id)
	if err != nil {
		l.a.log.Warn("command status", "command", id, "err", err)
		l.pokeSupervisor()
		return
	}
	if st.State == bothy.RunNeverSeen {
		l.report(ctx, id, &runtime.Report{State: bothy.RunNeverSeen})
		return
	}
	l.report(ctx, id, &runtime.Report{State: bothy.RunRunning, LastSeq: st.LastSeq})
	l.attach(ctx, id, cw.AfterSeq)
}

// refuse answers a run that arrives while the lease tears down: it never
// reached the supervisor. Saying so while the lease's credential still
// counts sends the command back to admitted, to run on the next lease
// instead of being lost with this one. The command stays in flight: the
// lease has nothing more to do with it.
func (l *lease) refuse(ctx context.Context, id string) {
	l.report(ctx, id, &runtime.Report{State: bothy.RunNeverSeen})
}

// done ends a command's run or status action. A run held meanwhile
// (see command) starts in its place, or is refused if the lease is no
// longer ready.
func (l *lease) done(ctx context.Context, id string) {
	l.mu.Lock()
	cw := l.held[id]
	delete(l.held, id)
	if cw == nil {
		delete(l.inflight, id)
	}
	ready, sup := l.state == leaseReady, l.sup
	l.mu.Unlock()
	switch {
	case cw == nil:
	case ready:
		go l.run(ctx, sup, cw)
	default:
		go l.refuse(ctx, id)
	}
}

// report sends a command report, retrying while the control plane cannot
// be reached.
func (l *lease) report(ctx context.Context, id string, r *runtime.Report) error {
	var err error
	for attempt := 0; attempt < 20 && ctx.Err() == nil; attempt++ {
		if err = l.a.cfg.Control.Report(ctx, l.cred(), id, r); err == nil {
			return nil
		} else if code := bothy.ErrorCode(err); code != bothy.EINTERNAL && code != bothy.EUNAUTHORIZED &&
			code != bothy.EUNAVAILABLE && code != bothy.EINSUFFICIENT {
			// A definite answer (a stale generation, a state that moved
			// on): retrying changes nothing. An unreachable store or a
			// full disk is for now, as an internal error is.
			l.a.log.Warn("report command", "command", id, "state", r.State, "err", err)
			return err
		}
		sleep(ctx, time.Duration(attempt+1)*100*time.Millisecond)
	}
	return err
}

// attach starts the command's stream unless one runs.
func (l *lease) attach(ctx context.Context, id string, after int64) {
	l.mu.Lock()
	if l.pumps[id] || l.state == leaseGone {
		l.mu.Unlock()
		return
	}
	l.pumps[id] = true
	l.pumpWG.Add(1)
	l.mu.Unlock()
	go l.pump(ctx, id, after)
}

// pump streams a command's events from the supervisor to the control plane,
// acknowledging each stored batch to the supervisor, until the terminal
// event is stored; then it checkpoints the workspace and reports the end.
// It resumes after the newest stored seq whenever a stream breaks.
func (l *lease) pump(ctx context.Context, id string, after int64) {
	defer func() {
		l.mu.Lock()
		delete(l.pumps, id)
		l.mu.Unlock()
		l.pumpWG.Done()
	}()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		term, err := l.stream(ctx, id, &after)
		if term != nil {
			l.finish(ctx, id, term, after)
			return
		}
		l.mu.Lock()
		gone := l.state == leaseGone || l.supDead
		renewed := l.supNew
		l.mu.Unlock()
		if gone {
			return
		}
		if code := bothy.ErrorCode(err); code == bothy.ECONFLICT || code == bothy.ENOTFOUND {
			// A stale generation or a command that ended: nothing more
			// of it is ours to send.
			l.a.log.Warn("command stream refused", "command", id, "err", err)
			return
		}
		if l.endedBefore(ctx, id, after) {
			return
		}
		l.a.log.Warn("command stream broke; resuming", "command", id, "after", after, "err", err)
		// The supervisor may have died: the watcher checks, and a new
		// one ends the wait (it has this command's end, lost).
		l.pokeSupervisor()
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
			backoff = min(2*backoff, 2*time.Second)
		case <-renewed:
			backoff = 50 * time.Millisecond
		}
		t.Stop()
	}
}

// stream sends one supervisor stream's events after *after, in batches,
// and returns the terminal event once it is stored.
func (l *lease) stream(ctx context.Context, id string, after *int64) (*bothy.Event, error) {
	l.mu.Lock()
	sup := l.sup
	l.mu.Unlock()
	s, err := sup.Events(ctx, id, *after)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	ch := make(chan *bothy.Event, batchEvents)
	errc := make(chan error, 1)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		defer close(ch)
		for {
			e, err := s.Next()
			if err != nil {
				errc <- err
				return
			}
			select {
			case ch <- e:
			case <-quit:
				return
			}
		}
	}()
	for {
		e, ok := <-ch
		if !ok {
			return nil, <-errc
		}
		batch, size := []bothy.Event{*e}, len(e.Data)
	drain:
		for len(batch) < batchEvents && size < batchBytes {
			select {
			case e2, ok := <-ch:
				if !ok {
					break drain
				}
				batch = append(batch, *e2)
				size += len(e2.Data)
			default:
				break drain
			}
		}
		for i := range batch {
			batch[i].TenantID, batch[i].CommandID = "", ""
		}
		resp, err := l.a.cfg.Control.AppendEvents(ctx, l.cred(), id, batch)
		if err != nil {
			return nil, err
		}
		*after = resp.LastSeq
		if err := sup.Ack(ctx, id, resp.LastSeq); err != nil {
			l.a.log.Warn("ack events to the supervisor", "command", id, "err", err)
		}
		last := &batch[len(batch)-1]
		if last.Kind == bothy.EventExit || last.Kind == bothy.EventState {
			return last, nil
		}
	}
}

// finish reports a command's end from its terminal event.
func (l *lease) finish(ctx context.Context, id string, term *bothy.Event, lastSeq int64) {
	r := &runtime.Report{LastSeq: lastSeq}
	switch term.Kind {
	case bothy.EventExit:
		r.State = bothy.RunFinished
		var exit bothy.Exit
		if err := json.Unmarshal([]byte(term.Fields), &exit); err != nil {
			r.State, r.Error = bothy.RunFailed, "unreadable exit event: "+err.Error()
		} else {
			r.Exit = &exit
		}
		l.mu.Lock()
		// Not once the agent tears the lease down itself (stop,
		// abandon): then it is the agent that ends the sandbox.
		ask := l.state == leaseReady || l.died
		l.mu.Unlock()
		if r.Exit != nil && (exit.ExitCode != 0 || exit.Signal != "") && ask {
			// A command killed with its sandbox (its init died: the
			// host's OOM killer, a crash) ends like one killed inside
			// it; the provider tells them apart.
			if reason, gone := l.sandboxGone(ctx); gone {
				r.Exit.SandboxLost = true
				l.end(ctx, id, r)
				l.lost(ctx, "the sandbox is gone: "+reason)
				return
			}
		}
	default:
		var st supervisor.FinalState
		json.Unmarshal([]byte(term.Fields), &st)
		r.State, r.Error = bothy.RunFailed, st.Reason
		if st.State == bothy.RunLost {
			r.State = bothy.RunLost
		}
		if st.Error != nil {
			r.Error = st.Error.Message
		}
		if st.Error != nil && st.Error.Code == bothy.ENOTFOUND {
			// The provider says the sandbox is gone (its init died: the
			// memory limit, a crash): the lease cannot run anything more.
			l.end(ctx, id, r)
			l.lost(ctx, "the sandbox is gone: "+st.Error.Message)
			return
		}
	}
	l.end(ctx, id, r)
}

// end completes a command's end report and sends it: it checkpoints the
// workspace, archives the output, and adds to the exit what only the
// agent knows: the bytes the checkpoint found written and the broker's
// bytes while the command ran.
func (l *lease) end(ctx context.Context, id string, r *runtime.Report) {
	// The archive's upload and the checkpoint touch different files:
	// they run at once.
	archived := make(chan struct{})
	go func() {
		defer close(archived)
		if digest, err := l.archive(ctx, id); err != nil {
			l.a.log.Error("archive command output", "command", id, "err", err)
		} else {
			r.OutputDigest = digest
		}
	}()
	rev, written, err := l.checkpointWritten(ctx)
	if err != nil {
		l.a.log.Error("checkpoint after command", "command", id, "err", err)
	}
	<-archived
	r.RevisionAfter = rev
	l.mu.Lock()
	netStart := l.netStart[id]
	delete(l.netStart, id)
	l.mu.Unlock()
	if r.Exit != nil {
		r.Exit.Usage.BytesWritten = written
		if l.a.cfg.Egress != nil {
			r.Exit.Usage.NetworkBytes = max(0, l.netBytes()-netStart)
		}
	}
	l.report(ctx, id, r)
}

// sandboxGone reports whether the lease's sandbox has ended, with the
// provider's words: the provider can no longer reattach to it
// (Provider.Recover says ENOTFOUND), twice in a row, and not because ctx
// ended (a provider that asks a program, as gvisor's runsc, cannot tell
// a failed question from a sandbox that is gone). Any other answer, or a
// lease without a handle, counts as alive.
func (l *lease) sandboxGone(ctx context.Context) (string, bool) {
	l.mu.Lock()
	name, handle := l.rec.Provider, l.rec.Handle
	l.mu.Unlock()
	prov := l.a.cfg.Providers[name]
	if prov == nil || len(handle) == 0 {
		return "", false
	}
	var reason string
	for range 2 {
		_, err := prov.Recover(ctx, handle)
		if bothy.ErrorCode(err) != bothy.ENOTFOUND || ctx.Err() != nil {
			return "", false
		}
		reason = bothy.ErrorMessage(err)
	}
	return reason, true
}

// lost tears down a lease whose sandbox died, reporting it lost, so that
// its commands settle and the next command starts a new lease.
func (l *lease) lost(ctx context.Context, reason string) {
	l.mu.Lock()
	l.died = true
	if l.state != leaseReady {
		l.mu.Unlock()
		return
	}
	l.state = leaseStopping
	l.mu.Unlock()
	l.a.log.Warn("lease lost", "lease", l.rec.LeaseID, "reason", reason)
	go l.teardown(ctx, bothy.LeaseLost, reason, false)
}

// archive stores the command's output archive (the supervisor's, see
// supervisor.ArchivePath) as a blob named by its SHA-256 under
// outputs/TENANT/, and returns "sha256:HEX". A command that wrote nothing
// has no archive: it returns "" (its events say all there is).
func (l *lease) archive(ctx context.Context, id string) (string, error) {
	path := supervisor.ArchivePath(filepath.Join(l.dir, "sup"), id)
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return "", err
	} else if fi.Size() == 0 {
		return "", nil
	}
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if _, err := l.a.cfg.Blobs.PutBlob(ctx, OutputKey(l.rec.TenantID, sum), f, size); err != nil {
		return "", err
	}
	return "sha256:" + sum, nil
}

// OutputKey is the blob key of a command's output archive.
func OutputKey(tenantID, sha256Hex string) string {
	return "outputs/" + tenantID + "/" + sha256Hex
}

// endedBefore handles a stream that ended without its terminal event
// because everything up to the terminal event was sent already (a poll
// answer built before the end arrived asked to attach again): if the
// supervisor says the command ended at or before seq after, the end is
// reported again from its status (the control plane takes a repeated
// end as a no-op) and the stream is not resumed.
func (l *lease) endedBefore(ctx context.Context, id string, after int64) bool {
	l.mu.Lock()
	sup := l.sup
	l.mu.Unlock()
	st, err := sup.Status(ctx, id)
	if err != nil || st.State == bothy.RunRunning || st.State == bothy.RunNeverSeen || st.LastSeq > after {
		return false
	}
	// The status says finished (with its exit), failed or lost, in the
	// words of a report.
	r := &runtime.Report{State: st.State, Exit: st.Exit, LastSeq: st.LastSeq}
	if st.Error != nil {
		r.Error = st.Error.Message
	}
	l.end(ctx, id, r)
	return true
}
