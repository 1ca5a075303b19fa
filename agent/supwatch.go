package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/bothyhq/bothy/supervisor"
)

// Bounds of the supervisor watcher: how often it checks that the lease's
// supervisor lives, how long a check waits for its answer, and how many
// checks in a row must find no one listening on the socket of a
// supervisor that still holds its directory before it is replaced.
const (
	supervisorCheckPeriod = time.Second
	supervisorPingTimeout = 2 * time.Second
	supervisorDeafChecks  = 3
)

// watchSupervisor replaces the lease's supervisor when it dies: a
// supervisor killed (SIGKILL, a crash) leaves its commands running with
// no one to journal them, and everything of the lease that goes through
// it (streams, runs, cancels, a stop) waits for it. Every second, and at
// once when a call to it fails (pokeSupervisor), it checks that the
// supervisor still holds its directory's lock (the kernel drops it when
// the process dies) and answers on its socket. A gone supervisor is
// replaced by a new one on the same directory, which kills what the dead
// one left and ends its running commands lost with the output journaled
// so far; the pumps resume against it and report those ends. One that
// holds its directory but has had no listener on its socket for three
// checks (its socket removed) is sent SIGTERM first. A supervisor that
// cannot be replaced ends the lease lost. It returns when the lease tears
// down or ctx ends.
func (l *lease) watchSupervisor(ctx context.Context) {
	supDir := filepath.Join(l.dir, "sup")
	deaf := 0
	for {
		t := time.NewTimer(supervisorCheckPeriod)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-l.supPoke:
			t.Stop()
		}
		l.mu.Lock()
		sup, tearing := l.sup, l.tearing || l.state == leaseGone
		l.mu.Unlock()
		if tearing {
			return
		}
		held, err := supervisor.Held(supDir)
		if err != nil {
			l.a.log.Warn("check the lease's supervisor", "lease", l.rec.LeaseID, "err", err)
			continue
		}
		why := "its process is gone"
		if held {
			pctx, cancel := context.WithTimeout(ctx, supervisorPingTimeout)
			err := sup.Ping(pctx)
			cancel()
			// Only a socket with no one listening counts: a supervisor
			// slow to answer (a loaded host) is alive.
			if err == nil || !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)) {
				deaf = 0
				continue
			}
			if deaf++; deaf < supervisorDeafChecks {
				continue
			}
			why = "it holds its directory but does not listen on its socket"
		}
		deaf = 0
		if !l.respawn(ctx, supDir, held, why) {
			return
		}
	}
}

// pokeSupervisor asks the watcher to check the supervisor now: a call
// to it failed.
func (l *lease) pokeSupervisor() {
	select {
	case l.supPoke <- struct{}{}:
	default:
	}
}

// respawn replaces the lease's supervisor (see watchSupervisor), stopping
// first one that holds the directory (held). It reports whether the lease
// goes on; when the lease tears down meanwhile it replaces nothing.
func (l *lease) respawn(ctx context.Context, supDir string, held bool, why string) bool {
	l.supMu.Lock()
	defer l.supMu.Unlock()
	l.mu.Lock()
	old, tearing := l.sup, l.tearing
	l.mu.Unlock()
	if tearing {
		return false
	}
	l.a.log.Warn("the lease's supervisor is gone; starting a new one on its directory", "lease", l.rec.LeaseID, "why", why)
	sup, err := l.spawnSupervisor(ctx, supDir, held)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		l.a.log.Error("replace the lease's supervisor", "lease", l.rec.LeaseID, "err", err)
		l.mu.Lock()
		// Nothing more of its commands can be read: their pumps end, and
		// the lease's release settles them.
		l.supDead = true
		l.mu.Unlock()
		l.lost(ctx, "the supervisor died and could not be replaced: "+err.Error())
		return false
	}
	l.mu.Lock()
	l.sup = sup
	close(l.supNew)
	l.supNew = make(chan struct{})
	l.mu.Unlock()
	old.Close()
	l.a.log.Info("the lease has a new supervisor", "lease", l.rec.LeaseID)
	return true
}

// spawnSupervisor starts a supervisor on supDir, with the agent's
// supervisor command, and dials it; one that still holds the directory
// (held) is sent SIGTERM and waited for first.
func (l *lease) spawnSupervisor(ctx context.Context, supDir string, held bool) (*supervisor.Client, error) {
	if held {
		if _, err := supervisor.Terminate(supDir); err != nil {
			return nil, fmt.Errorf("stop the supervisor that does not listen: %w", err)
		}
		if err := supervisor.WaitGone(ctx, supDir, 10*time.Second); err != nil {
			return nil, err
		}
	}
	cmd := l.a.cfg.SupervisorCommand
	if _, _, err := supervisor.Spawn(ctx, cmd[0], cmd[1:], supDir); err != nil {
		return nil, fmt.Errorf("spawn supervisor: %w", err)
	}
	sup, err := supervisor.Dial(ctx, supervisor.SocketPath(supDir))
	if err != nil {
		return nil, fmt.Errorf("dial supervisor: %w", err)
	}
	return sup, nil
}
