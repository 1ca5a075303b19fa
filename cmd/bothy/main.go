// Command bothy is bothy's command. "bothy serve" runs the API server
// (package http), and "bothy admin" makes its tokens; each lease's
// supervisor is the small program cmd/bothy-supervisor beside it, or its
// own supervisor verb. The verbs create, ls,
// get, stop, destroy, revisions, run, wait, logs, fs and receipt are a client of that
// API (BOTHY_URL and BOTHY_TOKEN). The other verbs work on a data directory
// directly: they checkpoint a directory into a computer's workspace,
// restore revisions, list and diff them, read and write a cold workspace's
// files (bothy local), collect garbage, and run the storage benchmark.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sandbox"
)

const usage = `bothy: durable computers for AI agents

usage: bothy COMMAND [flags] [args]

commands over the API (server and token from BOTHY_URL and BOTHY_TOKEN, or --url and --token;
--json prints JSON; these three may come before the command too, as in "bothy --json ls"):
  create [--label L] [--profile P] [--conversation C] [--work-job J] [--egress none|all|allow=HOST:PORT,...]
                            create a computer and print its id
  ls [--conversation C] [--label L] [--state S]
                            list computers
  get ID                    show a computer
  stop ID                   checkpoint a computer and stop it (it stays, cold)
  destroy ID                destroy a computer
  revisions ID              list a computer's revisions, newest first
  run ` + runArgs + `
                            run a command (standard input, unless a terminal, is its input),
                            stream its output, exit with its exit code (124: timed out);
                            Ctrl-C cancels it
  wait CMD_ID               wait for a command to end, exit with its exit code
  logs CMD_ID [--after N] [--follow]
                            print a command's output, or follow it to its end
  fs ls|stat|cat|rm ID PATH, fs put ID PATH < FILE, fs grep ID PATTERN [PATH]
                            read and change a computer's files
  receipt get CMD_ID|LEASE_ID
                            print the signed receipt of an ended command or a released lease
  receipt verify [--key FILE|BASE64] FILE
                            verify a receipt file (- for stdin) against --key or the server's
                            published key (BOTHY_URL; no token needed); exit 1 naming what failed

commands on the data directory:
  serve [--listen ADDR] [--receipt-key FILE] [--tls-cert F --tls-key F | --tls-self-signed]
        [--policy FILE | --profiles ... --lease-* ... --egress-allow-private CIDR,...]
                            run the API server (first start: creates DATA/admin.token and DATA/receipt.key,
                            prints BOTHY_URL and BOTHY_TOKEN, and BOTHY_CA with --tls-self-signed);
                            "bothy serve -h" lists the policy flags
  agent --control URL --id ID [--join-token-file F | --agent-token-file F] [--ca-file PEM] --blobs URL
                            run an agent that dials a control plane (enrols once with a join token)
  admin agent join --id ID [--expires 1h]
                            print a one-time join token for that agent
  admin token create --owner O [--scopes a,b] [--expires D]
                            print a new API token of --tenant (created if missing) that acts on
                            owner O's computers only, unless its scopes hold computers:any or admin
  admin token revoke ID     revoke a token of --tenant
  admin secret put NAME < VALUE
                            store a secret of --tenant in DATA/secrets (commands name it with --secret)
  demo                      run the quick-start job: checkpoint, edit, checkpoint, restore, verify
  checkpoint -c ID DIR      commit DIR as the computer's next revision (creates the computer)
  restore -c ID [-r N] DIR  restore revision N (default: current) into DIR, which must be empty
  log -c ID                 list the computer's revisions, newest first
  diff -c ID A B            list the paths that differ between revisions A and B
  local ls -c ID [PATH]     list a directory of the cold workspace
  local cat -c ID PATH      print a file of the cold workspace
  local put -c ID PATH [FILE]
                            write FILE (or standard input) to PATH, committing a revision
  supervisor -dir DIR       the per-lease supervisor, when bothy-supervisor is not beside bothy
                            (started by the agent, not by hand)
  gc [--grace D]            delete packs no revision references, older than the grace period
  bench [--quick]           measure checkpoint and restore, write docs/performance.md

common flags of the data directory's commands (before or after the command's own):
  --data DIR     data directory of the embedded default (env BOTHY_DATA, default ~/.local/share/bothy)
  --store URL    metadata store: postgres://... (default: SQLite at DIR/bothy.db)
  --blobs URL    blob store: gs://bucket/prefix or a directory (default: DIR/blobs)
  --tenant ID    tenant (default "default", created on first use)

Run "bothy COMMAND -h" for a command's flags.
`

func main() {
	// Nothing that started bothy passes a descriptor on to what bothy
	// starts (supervisors, sandboxes, commands): only what each child is
	// given as its ExtraFiles.
	if err := sandbox.CloseInheritedOnExec(); err != nil {
		fmt.Fprintf(os.Stderr, "bothy: %s\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	var code exitCode
	if errors.As(err, &code) {
		os.Exit(int(code))
	} else if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "bothy: %s\n", describe(err))
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	args = globalFlagsAfterVerb(args)
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
		"agent":      runAgent,
		"admin":      runAdmin,
		"demo":       runDemo,
		"checkpoint": runCheckpoint,
		"restore":    runRestore,
		"log":        runLog,
		"diff":       runDiff,
		"local":      runLocal,
		"gc":         runGC,
		"bench":      runBench,

		"create":    remote((*cli).create),
		"ls":        remote((*cli).list),
		"get":       remote((*cli).get),
		"stop":      remote((*cli).stop),
		"destroy":   remote((*cli).destroy),
		"revisions": remote((*cli).revisions),
		"run":       remote((*cli).run),
		"wait":      remote((*cli).wait),
		"logs":      remote((*cli).logs),
		"fs":        remote((*cli).fs),
		"receipt":   remote((*cli).receipt),
	}
	fn, ok := cmds[args[0]]
	if !ok {
		return bothy.Errorf(bothy.EINVALID, "unknown command %q; run \"bothy help\"", args[0])
	}
	return fn(ctx, args[1:])
}

// globalFlagsAfterVerb moves the flags of the verbs over the API (--url U,
// --token T, --json, in any of the flag package's spellings) from before
// the verb to just after it, where the verb parses them: "bothy --json ls"
// is "bothy ls --json". Arguments that do not start with those flags and
// then a verb are returned as they are.
func globalFlagsAfterVerb(args []string) []string {
	i := 0
	for i < len(args) {
		name, hasValue := strings.CutPrefix(args[i], "--")
		if !hasValue {
			name, hasValue = strings.CutPrefix(args[i], "-")
		}
		if !hasValue || name == "" {
			break
		}
		name, _, inline := strings.Cut(name, "=")
		switch {
		case name == "json":
			i++
		case (name == "url" || name == "token") && inline:
			i++
		case (name == "url" || name == "token") && i+1 < len(args):
			i += 2
		default:
			return args
		}
	}
	if i == 0 || i == len(args) {
		return args
	}
	out := append([]string{args[i]}, args[:i]...)
	return append(out, args[i+1:]...)
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
