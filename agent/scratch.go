package agent

import (
	"context"
	"slices"
	"time"

	"github.com/bothyhq/bothy/supervisor"
)

// The scratch watcher's sampling period: at least minScratchPeriod, and
// at least scratchCost times as long as the last measurement took, so that
// measuring a large writable layer costs at most a tenth of a CPU.
const (
	minScratchPeriod = time.Second
	scratchCost      = 10
)

// watchScratch enforces the lease's scratch limit across files: the
// provider stops a single file from growing past it (RLIMIT_FSIZE), and
// this stops many files from doing so together. While commands run, it
// measures what the lease wrote (hostcache.Workspace.WrittenBytes: the
// overlay's upper layer, or a copy less its base); when that is over the
// limit and grew since the last measurement, taken while the same
// commands ran, it cancels them and
// marks them disk_limited. A command that shrinks the layer (rm of what
// was written) is left alone, so a computer over its limit can be
// cleaned up; the first measurement after the running commands change is
// a new baseline, so a command is never judged by what an earlier one
// wrote.
func (l *lease) watchScratch(ctx context.Context, limit int64, cancel func(ctx context.Context, sup *supervisor.Client, id string) error) {
	last := int64(-1)
	var lastRunning []string
	period := minScratchPeriod
	for {
		if sleep(ctx, period); ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		state, ws, sup := l.state, l.ws, l.sup
		running := make([]string, 0, len(l.pumps))
		for id := range l.pumps {
			running = append(running, id)
		}
		l.mu.Unlock()
		slices.Sort(running)
		if !slices.Equal(running, lastRunning) {
			last, lastRunning = -1, running
		}
		if state != leaseReady {
			return
		} else if len(running) == 0 || ws == nil || sup == nil {
			continue
		}
		began := time.Now()
		size := ws.WrittenBytes()
		period = max(minScratchPeriod, scratchCost*time.Since(began))
		grew := last >= 0 && size > last
		last = size
		if size <= limit || !grew {
			continue
		}
		l.a.log.Warn("scratch limit: cancelling the lease's commands", "lease", l.rec.LeaseID, "bytes", size, "limit", limit)
		for _, id := range running {
			if err := cancel(ctx, sup, id); err != nil {
				l.a.log.Warn("cancel command over the scratch limit", "command", id, "err", err)
			}
		}
	}
}

// cancelDiskLimited cancels a command for the scratch limit: the
// supervisor journals its end as disk_limited, which holds across a
// restart of the agent.
func cancelDiskLimited(ctx context.Context, sup *supervisor.Client, id string) error {
	_, err := sup.CancelDiskLimited(ctx, id)
	return err
}
