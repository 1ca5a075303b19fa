package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bothyhq/bothy/bench"
)

func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "a small tree and 3 runs, for a smoke run")
	runs := fs.Int("runs", 5, "runs per figure")
	out := fs.String("out", "docs/performance.md", "report file; the JSON goes beside it")
	work := fs.String("work", filepath.Join(os.TempDir(), "bothy-bench"), "scratch directory on the disk under test")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := bench.StorageOptions{Tree: bench.DefaultTree, Runs: *runs, WorkDir: *work, Progress: os.Stderr}
	command := "go run ./cmd/bothy bench"
	if *quick {
		opts.Tree, opts.Runs = bench.QuickTree, 3
		command += " --quick"
	}
	defer os.RemoveAll(*work)
	rep, err := bench.RunStorage(ctx, opts)
	if err != nil {
		return err
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md, command); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(*out, md.Bytes(), 0o644); err != nil {
		return err
	}
	jsonPath := strings.TrimSuffix(*out, filepath.Ext(*out)) + ".json"
	if err := rep.WriteJSON(jsonPath); err != nil {
		return err
	}
	os.Stdout.Write(md.Bytes())
	fmt.Fprintf(os.Stderr, "wrote %s and %s\n", *out, jsonPath)
	return nil
}
