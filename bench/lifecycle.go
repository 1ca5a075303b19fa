package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/hostcache"
	bhttp "github.com/bothyhq/bothy/http"
)

// coldStart times the first command of a stopped computer with a 10 MiB
// workspace (see coldStarts).
func coldStart(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, src string) error {
	return coldStarts(ctx, e, opts, rep, src, "bench-cold", "bothy_cold_start", opts.ColdRuns)
}

// largeColdStart is coldStart with the storage bench's large tree.
func largeColdStart(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	return coldStarts(ctx, e, opts, rep, opts.LargeTree, "bench-large", "bothy_large_cold_start", opts.LargeRuns)
}

// coldStarts seeds a computer with the tree src and times its first
// command after a stop, from the request to its answer: with the base
// revision already in the host cache (a computer that ran on this host
// before), and with the cache evicted, so the revision is restored from
// the blob store first. Each stop is timed as well: checkpoint, teardown,
// release. Figures are named PREFIX_warm_cache, PREFIX_cold_cache, and
// PREFIX_stop.
func coldStarts(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, src, label, prefix string, runs int) error {
	p := opts.Progress
	c, err := e.create(ctx, bhttp.CreateComputerRequest{Label: label})
	if err != nil {
		return err
	}
	if err := e.seed(ctx, c.ID, src); err != nil {
		return fmt.Errorf("seed workspace: %w", err)
	}
	if c, err = e.client.FindComputer(ctx, c.ID); err != nil {
		return err
	}
	tree := filepath.Join(e.dir, "cache", e.tenant.ID, c.RootDigest)
	trueReq := bothy.RunRequest{Argv: []string{"true"}}
	// Once untimed: the first start materializes the revision.
	if _, err := e.run(ctx, c.ID, trueReq); err != nil {
		return err
	}
	var stops []float64
	stop := func() error {
		d, err := timed(func() error { _, err := e.client.StopComputer(ctx, c.ID); return err })
		stops = append(stops, d)
		return err
	}
	if err := stop(); err != nil {
		return err
	}
	cache, err := hostcache.Open(filepath.Join(e.dir, "cache"))
	if err != nil {
		return err
	}
	cache.MinAge = time.Nanosecond // nothing is between Materialize and Mount here
	warmPh, coldPh := phases{}, phases{}
	start := func(name string, ph phases) (float64, error) {
		syscall.Sync()
		d, _, err := e.timedRun(ctx, c.ID, trueReq, ph)
		if err == nil {
			fmt.Fprintf(p, "  %-36s %8.1f ms\n", name, d)
			err = stop()
		}
		return d, err
	}
	var warm, cold []float64
	e.ops.reset()
	for i := 0; i < runs; i++ {
		d, err := start("cold start (warm host cache)", warmPh)
		if err != nil {
			return err
		}
		warm = append(warm, d)
		if _, err := cache.Evict(ctx, nil, 0); err != nil {
			return err
		} else if _, err := os.Stat(tree); !os.IsNotExist(err) {
			return fmt.Errorf("evicting the host cache left %s (%v)", tree, err)
		}
		if d, err = start("cold start (cold host cache)", coldPh); err != nil {
			return err
		}
		cold = append(cold, d)
	}
	rep.add(p, newFigure(prefix+"_warm_cache", "ms", warm))
	rep.add(p, newFigure(prefix+"_cold_cache", "ms", cold))
	rep.add(p, newFigure(prefix+"_stop", "ms", stops))
	warmPh.figures(rep, p, prefix+"_warm_cache")
	coldPh.figures(rep, p, prefix+"_cold_cache")
	// The provider's Start alone, one lease starting at a time: the
	// baseline of the provider starts when 15 start at once.
	if _, took := e.ops.reset(); e.uncounted == "" {
		rep.add(p, newFigure(prefix+"_provider_start", "ms", took["start"]))
	}
	return nil
}

// fanOutCreate times 30 computers created for one conversation, one API
// call after another, beside 30 calls of GET /healthz on the same
// connection; it then checks that all 30 are cold, with no lease.
func fanOutCreate(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	p := opts.Progress
	var health, create []float64
	for i := 0; i < opts.FanOutRuns; i++ {
		d, err := timed(func() error {
			for range fanOut {
				if err := e.client.Health(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		health = append(health, d)
		conv := fmt.Sprintf("bench-conversation-%d", i)
		if d, err = timed(func() error {
			for range fanOut {
				if _, err := e.create(ctx, bhttp.CreateComputerRequest{ConversationID: conv}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		create = append(create, d)
		fmt.Fprintf(p, "  %-36s %8.1f ms (30 x /healthz: %.1f ms)\n", "create 30 computers", d, health[i])
		list, err := e.client.ListComputers(ctx, bothy.ComputerFilter{ConversationID: conv})
		if err != nil {
			return err
		} else if len(list) != fanOut {
			return fmt.Errorf("conversation %s lists %d computers, not %d", conv, len(list), fanOut)
		}
		for _, c := range list {
			if c.State != bothy.StateCold {
				return fmt.Errorf("computer %s of the fan-out is %s, not cold", c.ID, c.State)
			}
			if _, err := e.store.ActiveLease(ctx, e.tenant.ID, c.ID); bothy.ErrorCode(err) != bothy.ENOTFOUND {
				return fmt.Errorf("computer %s of the fan-out has a lease (%v)", c.ID, err)
			}
		}
	}
	f := newFigure("baseline_healthz_x30", "ms", health)
	f.Command = "30 x GET /healthz, one after another"
	rep.add(p, f)
	rep.add(p, newFigure("bothy_create_30_computers", "ms", create))
	return nil
}

// editCheckpoint measures the checkpoint after a small edit on a warm
// computer with the 10 MiB workspace. Every command ends with a
// checkpoint of the writable layer, and its answer waits for the commit,
// so a command that appends one line to one file is timed against one
// that changes nothing (both bash scripts through the API). Their finish
// phases (see phaseNames), which hold the checkpoint and commit without
// the noise of the exec chain, are kept too: the difference of their
// medians is what checkpointing and committing the edit costs.
func editCheckpoint(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, src string) error {
	p := opts.Progress
	c, err := e.create(ctx, bhttp.CreateComputerRequest{Label: "bench-edit"})
	if err != nil {
		return err
	}
	if err := e.seed(ctx, c.ID, src); err != nil {
		return err
	}
	if _, err := e.run(ctx, c.ID, bothy.RunRequest{Script: "true"}); err != nil {
		return err
	}
	var same, edit []float64
	samePh, editPh := phases{}, phases{}
	var last int64
	for i := 0; i < opts.EditRuns; i++ {
		d, _, err := e.timedRun(ctx, c.ID, bothy.RunRequest{Script: "true"}, samePh)
		if err != nil {
			return err
		}
		same = append(same, d)
		d, cmd, err := e.timedRun(ctx, c.ID, bothy.RunRequest{Script: fmt.Sprintf("echo edit %d >> %q", i, rep.EditPath)}, editPh)
		if err != nil {
			return err
		} else if cmd.RevisionAfter <= last {
			return fmt.Errorf("the edit committed no new revision (revision after: %d)", cmd.RevisionAfter)
		}
		last = cmd.RevisionAfter
		edit = append(edit, d)
		fmt.Fprintf(p, "  %-36s %8.1f ms (no edit: %.1f ms)\n", "command with an edit", d, same[i])
	}
	f := newFigure("bothy_command_no_edit", "ms", same)
	f.Command = "bash -c true through the API (its checkpoint finds nothing to commit)"
	rep.add(p, f)
	f = newFigure("bothy_command_edit", "ms", edit)
	f.Command = "bash -c 'echo … >> FILE' through the API (its checkpoint commits a revision)"
	rep.add(p, f)
	// The finish phase (the process's end to the recorded end) holds the
	// checkpoint: it is the part of the difference that is not noise of
	// the exec chain.
	rep.add(p, newFigure("bothy_command_no_edit_finish", "ms", samePh["finish"]))
	rep.add(p, newFigure("bothy_command_edit_finish", "ms", editPh["finish"]))
	return nil
}

// concurrentStarts starts 15 cold computers at once (one `true` each,
// sent together) and times until every answer is in, beside 15 plain
// `bwrap … true` started at once; then it stops the 15 at once, timed
// apart.
func concurrentStarts(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	p := opts.Progress
	ids := make([]string, concurrent)
	for i := range ids {
		c, err := e.create(ctx, bhttp.CreateComputerRequest{Label: fmt.Sprintf("bench-concurrent-%d", i)})
		if err != nil {
			return err
		}
		ids[i] = c.ID
	}
	all := func(fn func(i int) error) error {
		errs := make([]error, len(ids))
		var wg sync.WaitGroup
		for i := range ids {
			wg.Go(func() { errs[i] = fn(i) })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	var base, starts, stops, startPeak, stopPeak, startTook, stopTook []float64
	for i := 0; i < opts.ConcurrentRuns; i++ {
		d, err := timed(func() error { return all(func(int) error { return plainBwrap() }) })
		if err != nil {
			return err
		}
		base = append(base, d)
		syscall.Sync()
		e.ops.reset()
		if d, err = timed(func() error {
			return all(func(i int) error {
				_, err := e.run(ctx, ids[i], bothy.RunRequest{Argv: []string{"true"}})
				return err
			})
		}); err != nil {
			return err
		}
		peak, took := e.ops.reset()
		starts, startPeak, startTook = append(starts, d), append(startPeak, float64(peak["start"])), append(startTook, took["start"]...)
		fmt.Fprintf(p, "  %-36s %8.1f ms (15 plain bwrap at once: %.1f ms); at most %d provider starts at once\n", "15 cold computers at once", d, base[i], peak["start"])
		if d, err = timed(func() error {
			return all(func(i int) error { _, err := e.client.StopComputer(ctx, ids[i]); return err })
		}); err != nil {
			return err
		}
		peak, took = e.ops.reset()
		stops, stopPeak, stopTook = append(stops, d), append(stopPeak, float64(peak["stop"])), append(stopTook, took["stop"]...)
		fmt.Fprintf(p, "  %-36s %8.1f ms; at most %d provider stops at once\n", "stop of the 15 at once", d, peak["stop"])
	}
	f := newFigure("baseline_bwrap_true_x15_at_once", "ms", base)
	f.Command = "15 x bwrap --ro-bind / / --unshare-all --die-with-parent true, at once"
	rep.add(p, f)
	rep.add(p, newFigure("bothy_start_15_at_once", "ms", starts))
	rep.add(p, newFigure("bothy_stop_15_at_once", "ms", stops))
	// The peaks are counted by the hook around the provider (opCounter),
	// one figure per round; the durations are of every provider call.
	if e.uncounted == "" {
		rep.add(p, newFigure("bothy_start_15_peak_provider_starts", "calls", startPeak))
		rep.add(p, newFigure("bothy_start_15_provider_start", "ms", startTook))
		rep.add(p, newFigure("bothy_stop_15_peak_provider_stops", "calls", stopPeak))
		rep.add(p, newFigure("bothy_stop_15_provider_stop", "ms", stopTook))
	}
	return nil
}

// upload writes a new file of random bytes through the files API to a
// cold computer (which commits a revision), beside `cp` of the same file
// on the host's disk. Each run's file is new, so nothing deduplicates.
func upload(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	p := opts.Progress
	c, err := e.create(ctx, bhttp.CreateComputerRequest{Label: "bench-upload"})
	if err != nil {
		return err
	}
	dir := filepath.Join(opts.WorkDir, "runtime", "upload")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	size := int64(opts.UploadMiB) << 20
	var cp, api []float64
	for i := 0; i < opts.UploadRuns; i++ {
		src := filepath.Join(dir, fmt.Sprintf("artifact%d", i))
		if err := randomFile(src, size, uint64(i+10)); err != nil {
			return err
		}
		syscall.Sync()
		d, err := timed(func() error { return shell(fmt.Sprintf("cp %q %q", src, src+".copy")) })
		if err != nil {
			return err
		}
		cp = append(cp, d)
		syscall.Sync()
		if d, err = timed(func() error {
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = e.client.WriteFile(ctx, "", c.ID, "artifact.bin", f, bothy.WriteOptions{})
			return err
		}); err != nil {
			return err
		}
		api = append(api, d)
		fmt.Fprintf(p, "  %-36s %8.0f ms (cp: %.0f ms)\n", fmt.Sprintf("upload %d MiB", opts.UploadMiB), d, cp[i])
	}
	f := newFigure("baseline_cp_artifact", "ms", cp)
	f.Command = fmt.Sprintf("cp of a %d MiB file of random bytes on the host's disk", opts.UploadMiB)
	rep.add(p, f)
	rep.add(p, newFigure("bothy_upload_artifact", "ms", api))
	return nil
}

// randomFile writes size random bytes to path.
func randomFile(path string, size int64, seed uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	if _, err := io.CopyN(f, rng, size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
