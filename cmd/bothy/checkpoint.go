package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
)

func runCheckpoint(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("checkpoint", flag.ContinueOnError)
	id := fs.String("c", "", "computer id (created on first use)")
	e, args, err := openVerb(ctx, fs, args, "bothy checkpoint -c ID DIR", func(args []string) bool { return *id != "" && len(args) == 1 })
	if err != nil {
		return err
	}
	defer e.Close()
	rev, res, err := e.checkpoint(ctx, *id, args[0])
	if err != nil {
		return err
	}
	printCheckpoint(rev, res)
	return nil
}

// checkpoint commits dir as the computer's next revision.
func (e *env) checkpoint(ctx context.Context, id, dir string) (*bothy.Revision, *checkpoint.Result, error) {
	c, err := e.computer(ctx, id, true)
	if err != nil {
		return nil, nil, err
	}
	repo, parent, err := e.snapshot(ctx, c, 0)
	if err != nil {
		return nil, nil, err
	}
	res, err := repo.Checkpoint(ctx, dir, parent, checkpoint.CheckpointOptions{StatCache: e.statCache(c.ID)})
	if err != nil {
		return nil, nil, err
	}
	rev, err := e.store.CommitRevision(ctx, res.CommitRequest(c, "cli:checkpoint"))
	return rev, res, err
}

func printCheckpoint(rev *bothy.Revision, res *checkpoint.Result) {
	s := res.Stats
	fmt.Printf("revision %d  root %.16s  %d files  %s\n", rev.Number, rev.RootDigest, rev.FileCount, size(rev.Size))
	fmt.Printf("  read %d files (%s); wrote %d new chunks (%s), %d tree objects, %d packs (%s)\n",
		s.FilesRead, size(s.BytesRead), s.NewBlobs, size(s.NewBlobBytes), s.NewTrees, s.PacksWritten, size(s.PackBytes))
}

func runRestore(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	id := fs.String("c", "", "computer id")
	n := fs.Int64("r", 0, "revision number (default: current)")
	e, args, err := openVerb(ctx, fs, args, "bothy restore -c ID [-r N] DIR", func(args []string) bool { return *id != "" && len(args) == 1 })
	if err != nil {
		return err
	}
	defer e.Close()
	c, err := e.computer(ctx, *id, false)
	if err != nil {
		return err
	}
	_, snap, err := e.snapshot(ctx, c, *n)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := snap.Restore(ctx, args[0], checkpoint.RestoreOptions{}); err != nil {
		return err
	}
	num := *n
	if num == 0 {
		num = c.Revision
	}
	fmt.Printf("restored %s revision %d into %s in %s\n", c.ID, num, args[0], time.Since(start).Round(time.Millisecond))
	return nil
}

func runLog(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("log", flag.ContinueOnError)
	id := fs.String("c", "", "computer id")
	limit := fs.Int("n", 20, "how many revisions")
	e, _, err := openVerb(ctx, fs, args, "bothy log -c ID", func([]string) bool { return *id != "" })
	if err != nil {
		return err
	}
	defer e.Close()
	revs, err := e.store.ListRevisions(ctx, e.tenant.ID, *id, 0, *limit)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REVISION\tROOT\tFILES\tSIZE\tPACKS\tBY\tCREATED")
	for _, r := range revs {
		fmt.Fprintf(w, "%d\t%.16s\t%d\t%s\t%d\t%s\t%s\n", r.Number, r.RootDigest, r.FileCount, size(r.Size), len(r.Packs), r.CreatedBy, r.CreatedAt.Format(time.RFC3339))
	}
	return w.Flush()
}

func runDiff(ctx context.Context, args []string) error {
	var cfg config
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	id := fs.String("c", "", "computer id")
	args, err := parseFlags(fs, &cfg, args)
	if err != nil {
		return err
	} else if *id == "" || len(args) != 2 {
		return bothy.Errorf(bothy.EINVALID, "usage: bothy diff -c ID A B")
	}
	var nums [2]int64
	for i, a := range args {
		if nums[i], err = strconv.ParseInt(a, 10, 64); err != nil || nums[i] < 1 {
			return bothy.Errorf(bothy.EINVALID, "revision %q is not a number from 1", a)
		}
	}
	e, err := openEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	c, err := e.computer(ctx, *id, false)
	if err != nil {
		return err
	}
	_, a, err := e.snapshot(ctx, c, nums[0])
	if err != nil {
		return err
	}
	_, b, err := e.snapshot(ctx, c, nums[1])
	if err != nil {
		return err
	}
	changes, err := checkpoint.Diff(ctx, a, b)
	if err != nil {
		return err
	}
	for _, ch := range changes {
		fmt.Printf("%s %s\n", ch.Kind, ch.Path)
	}
	return nil
}

func runGC(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	grace := fs.Duration("grace", time.Hour, "keep unreferenced packs younger than this")
	e, _, err := openVerb(ctx, fs, args, "bothy gc", func([]string) bool { return true })
	if err != nil {
		return err
	}
	defer e.Close()
	res, err := checkpoint.GC(ctx, e.store, e.blobs, checkpoint.GCOptions{Grace: *grace})
	if err != nil {
		return err
	}
	fmt.Printf("%d tenants, %d packs: %d referenced, %d younger than %s, %d deleted (%s)\n",
		res.Tenants, res.Packs, res.Referenced, res.Young, *grace, res.Deleted, size(res.DeletedBytes))
	return nil
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
