package agent

import (
	"context"
	"io/fs"
	"path/filepath"
	"slices"
	"syscall"
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
// measures the writable layer (the overlay's upper directory, all that
// the lease wrote); when that is over the limit and grew since the last
// measurement, taken while the same commands ran, it cancels them and
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
		state, ov, sup := l.state, l.ov, l.sup
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
		} else if len(running) == 0 || ov == nil || sup == nil {
			continue
		}
		began := time.Now()
		size := diskUsage(ov.Upper)
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

// diskUsage returns the bytes of disk that the tree under dir takes
// (allocated blocks, so a sparse file counts what it holds). It never
// follows symlinks; entries that vanish while it walks are skipped.
func diskUsage(dir string) int64 {
	var total int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	return total
}

// cancelDiskLimited cancels a command for the scratch limit: the
// supervisor journals its end as disk_limited, which holds across a
// restart of the agent.
func cancelDiskLimited(ctx context.Context, sup *supervisor.Client, id string) error {
	_, err := sup.CancelDiskLimited(ctx, id)
	return err
}
