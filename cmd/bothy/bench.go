package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bothyhq/bothy/bench"
	"github.com/bothyhq/bothy/cmd/internal/providers"
	bserver "github.com/bothyhq/bothy/server"
)

func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "a smoke run: a small tree, 3 runs, fewer runtime runs")
	runs := fs.Int("runs", 5, "runs per storage figure")
	out := fs.String("out", "docs/performance.md", "report file; the JSON and the charts go beside it")
	work := fs.String("work", filepath.Join(os.TempDir(), "bothy-bench"), "scratch directory on the disk under test")
	storage := fs.Bool("storage", true, "measure the workspace store")
	rt := fs.Bool("runtime", true, "measure computers through an embedded server (root, bubblewrap)")
	fileops := fs.Bool("fileops", true, "measure file operations inside a computer against the host's disk")
	npm := fs.Bool("npm", true, "measure npm install of a fixed dependency set from a local cache, filled first through npm's configured registry (not in --quick)")
	admission := fs.Bool("admission", true, "measure command admission and lease reservation throughput on SQLite and PostgreSQL")
	pgURL := fs.String("postgres", os.Getenv(bench.EnvPostgresURL), "PostgreSQL server for the admission bench, whose role may create a database (default $"+bench.EnvPostgresURL+")")
	charts := fs.Bool("charts", true, "draw PNG charts beside the report")
	only := fs.String("only", "", "run only the runtime scenarios whose names contain one of these comma-separated words")
	from := fs.String("from", "", "measure nothing: write the report and charts again from this JSON of an earlier run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *from != "" {
		b, err := os.ReadFile(*from)
		if err != nil {
			return err
		}
		var rep bench.Report
		if err := json.Unmarshal(b, &rep); err != nil {
			return fmt.Errorf("read %s: %w", *from, err)
		}
		rep.ComputeGoals()
		return writeReport(&rep, *out, *charts, time.Now())
	}
	began := time.Now()
	rep := &bench.Report{Command: "go run ./cmd/bothy bench", Quick: *quick, LoadStart: bench.LoadAverage()}
	if *quick {
		rep.Command += " --quick"
	}
	defer os.RemoveAll(*work)
	var large string
	if *storage {
		opts := bench.StorageOptions{Tree: bench.DefaultTree, Runs: *runs, WorkDir: filepath.Join(*work, "storage"), Progress: os.Stderr}
		if *quick {
			opts.Tree, opts.Runs = bench.QuickTree, 3
		}
		fmt.Fprintf(os.Stderr, "== the workspace store\n")
		var err error
		if rep.StorageReport, err = bench.RunStorage(ctx, opts); err != nil {
			return err
		}
		// The runtime runs on a quiet disk, with only the tree kept for
		// its large cold starts.
		if err := removeExcept(opts.WorkDir, "src"); err != nil {
			return err
		}
		large = filepath.Join(opts.WorkDir, "src")
	}
	if *rt {
		// The in-process agent is `bothy serve`'s: the same providers and
		// supervisor program (bothy-supervisor beside this binary, or its
		// own supervisor verb).
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		sup := bserver.SupervisorFor(exe)
		fmt.Fprintf(os.Stderr, "supervisor of each lease: %s\n", strings.Join(sup, " "))
		opts := bench.RuntimeOptions{Providers: providers.All(), SupervisorCommand: sup, CLI: exe,
			WorkDir: *work, Progress: os.Stderr}
		if *quick {
			opts = bench.QuickRuntime
			opts.Providers, opts.SupervisorCommand, opts.CLI, opts.WorkDir, opts.Progress = providers.All(), sup, exe, *work, os.Stderr
		}
		if !*fileops {
			opts.FileOpsRuns = -1
		}
		if !*npm {
			opts.NpmRuns, opts.NpmSkip = -1, "left out with --npm=false"
		}
		opts.LargeTree, opts.Only = large, *only
		fmt.Fprintf(os.Stderr, "== computers through the API\n")
		if rep.Runtime, err = bench.RunRuntime(ctx, opts); err != nil {
			return err
		}
	}
	if *admission {
		opts := bench.AdmissionOptions{WorkDir: filepath.Join(*work, "admission"), Postgres: *pgURL, Progress: os.Stderr,
			PostgresSkip: "no PostgreSQL server given: $" + bench.EnvPostgresURL + " is unset (as root, `eval \"$(scripts/pg-test-env)\"` starts the local one and sets it)"}
		if *quick {
			opts.Ops, opts.Rounds = 100, 1
		}
		fmt.Fprintf(os.Stderr, "== admission and reservation throughput\n")
		var err error
		if rep.Admission, err = bench.RunAdmission(ctx, opts); err != nil {
			return err
		}
	}
	rep.Finish(time.Since(began))
	return writeReport(rep, *out, *charts, began)
}

// writeReport writes the report to out, the JSON and the charts beside it,
// and the report to standard output.
func writeReport(rep *bench.Report, out string, charts bool, began time.Time) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	base := strings.TrimSuffix(out, filepath.Ext(out))
	if charts {
		if err := rep.WriteCharts(base); err != nil {
			return err
		}
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		return err
	}
	if err := os.WriteFile(out, md.Bytes(), 0o644); err != nil {
		return err
	}
	if err := rep.WriteJSON(base + ".json"); err != nil {
		return err
	}
	os.Stdout.Write(md.Bytes())
	fmt.Fprintf(os.Stderr, "wrote %s and %s.json in %s\n", out, base, time.Since(began).Round(time.Second))
	return nil
}

// removeExcept removes everything in dir but the entry keep.
func removeExcept(dir, keep string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != keep {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
