// Command bothy is the one binary of bothy. "bothy serve" runs the API server
// (package http), and "bothy admin" makes its tokens; the other verbs work on
// a data directory directly: they checkpoint a directory into a computer's
// workspace, restore revisions, list and diff them, read and write a cold
// workspace's files, collect garbage, and run the storage benchmark.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/bothyhq/bothy"
)

const usage = `bothy: durable computers for AI agents

usage: bothy COMMAND [flags] [args]

commands:
  serve [--listen ADDR]     run the API server (first start: creates DATA/admin.token, prints BOTHY_URL and BOTHY_TOKEN)
  admin token create --owner O [--scopes a,b] [--expires D]
                            print a new API token of --tenant (created if missing)
  admin token revoke ID     revoke a token of --tenant
  demo                      run the quick-start job: checkpoint, edit, checkpoint, restore, verify
  checkpoint -c ID DIR      commit DIR as the computer's next revision (creates the computer)
  restore -c ID [-r N] DIR  restore revision N (default: current) into DIR, which must be empty
  log -c ID                 list the computer's revisions, newest first
  diff -c ID A B            list the paths that differ between revisions A and B
  ls -c ID [PATH]           list a directory of the cold workspace
  cat -c ID PATH            print a file of the cold workspace
  put -c ID PATH [FILE]     write FILE (or standard input) to PATH, committing a revision
  supervisor -dir DIR       the per-lease supervisor (started by the agent, not by hand)
  gc [--grace D]            delete packs no revision references, older than the grace period
  bench [--quick]           measure checkpoint and restore, write docs/performance.md

common flags (before or after the command's own):
  --data DIR     data directory of the embedded default (env BOTHY_DATA, default ~/.local/share/bothy)
  --store URL    metadata store: postgres://... (default: SQLite at DIR/bothy.db)
  --blobs URL    blob store: gs://bucket/prefix or a directory (default: DIR/blobs)
  --tenant ID    tenant (default "default", created on first use)

Run "bothy COMMAND -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "bothy: %s\n", describe(err))
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Print(usage)
		if len(args) == 0 {
			return flag.ErrHelp
		}
		return nil
	}
	cmds := map[string]func(context.Context, []string) error{
		"serve":      runServe,
		"supervisor": runSupervisor,
		"admin":      runAdmin,
		"demo":       runDemo,
		"checkpoint": runCheckpoint,
		"restore":    runRestore,
		"log":        runLog,
		"diff":       runDiff,
		"ls":         runLs,
		"cat":        runCat,
		"put":        runPut,
		"gc":         runGC,
		"bench":      runBench,
	}
	fn, ok := cmds[args[0]]
	if !ok {
		return bothy.Errorf(bothy.EINVALID, "unknown command %q; run \"bothy help\"", args[0])
	}
	return fn(ctx, args[1:])
}

// describe renders an error for a person: domain errors by their message,
// anything else in full (the CLI is local, so internal detail helps).
func describe(err error) string {
	var e *bothy.Error
	if errors.As(err, &e) {
		return fmt.Sprintf("%s (%s)", e.Message, e.Code)
	}
	return err.Error()
}
