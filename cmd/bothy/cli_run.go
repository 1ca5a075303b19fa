package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"unicode/utf8"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// runArgs is the one synopsis of `bothy run`'s arguments: the verb's
// usage error and "bothy help" both print it.
const runArgs = "ID [--key K] [--work-job J] [--timeout D] [--detach] [--cwd DIR] [--env K=V]... [--secret NAME[=VAR]]... [--secret-file NAME[=VAR]]... [--memory SIZE] [--cpus N] [--pids N] [--scratch SIZE] [--stdin=false] -- CMD [ARGS...]"

const runUsage = "bothy run " + runArgs

// run runs a command on a computer and streams its output: stdout events to
// stdout, stderr events to stderr. It exits with the command's exit code
// (see commandExit). An interrupt cancels the command and waits for its end.
func (c *cli) run(ctx context.Context, args []string) error {
	var rf remoteFlags
	env := envFlag{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	key := fs.String("key", "", "idempotency key: running again with it runs nothing new and follows the first command")
	workJob := fs.String("work-job", "", "external reference (work_job_id) for the command's receipt (default: the computer's)")
	timeout := fs.Duration("timeout", 0, "kill the command after this long (0: the server's default)")
	detach := fs.Bool("detach", false, "print the command id and return at once")
	cwd := fs.String("cwd", "", "working directory, relative to the workspace root")
	fs.Var(env, "env", "`K=V` environment variable of the command (repeatable)")
	var secrets secretFlag
	fs.Var(&secrets, "secret", "`NAME[=VAR]`: give the command the tenant's secret NAME in variable VAR (default: NAME upper-cased); redacted from its output (repeatable)")
	fs.Var(&secretFile{&secrets}, "secret-file", "`NAME[=VAR]`: give the command the secret NAME as a file, whose path is in VAR (repeatable)")
	memory := fs.String("memory", "", "the command's own memory limit (512MiB, 2GiB), within the lease's")
	cpus := fs.Float64("cpus", 0, "the command's own CPU limit, in CPUs (0.5 is half a CPU)")
	pids := fs.Int64("pids", 0, "the command's own limit on processes and threads at once")
	scratch := fs.String("scratch", "", "the size a file written by the command may grow to (512MiB)")
	stdin := fs.Bool("stdin", true, "send standard input (at most 1 MiB) to the command, unless it is a terminal")
	cl, args, err := c.verb(fs, &rf, args, 1, runUsage, func(a []string) bool { return len(a) >= 2 })
	if err != nil {
		return err
	}
	req := bothy.RunRequest{Argv: args[1:], Cwd: *cwd, TimeoutMS: timeout.Milliseconds(), IdempotencyKey: *key, WorkJobID: *workJob}
	if len(env) > 0 {
		req.Env = env
	}
	req.Secrets = secrets
	req.Limits = bothy.Limits{CPUMillis: int64(*cpus * 1000), Pids: *pids}
	for _, f := range []struct {
		flag, v string
		n       *int64
	}{{"--memory", *memory, &req.Limits.MemoryBytes}, {"--scratch", *scratch, &req.Limits.ScratchBytes}} {
		if f.v == "" {
			continue
		}
		if *f.n, err = parseBytes(f.v); err != nil {
			return bothy.Errorf(bothy.EINVALID, "%s: %v", f.flag, err)
		}
	}
	if *stdin && !c.inTerminal && c.in != nil {
		b, err := io.ReadAll(io.LimitReader(c.in, bothy.MaxStdinBytes+1))
		if err != nil {
			return fmt.Errorf("read standard input: %w", err)
		} else if len(b) > bothy.MaxStdinBytes {
			return bothy.Errorf(bothy.ETOOLARGE, "standard input is over %d bytes; pass --stdin=false or write a file with bothy fs put", bothy.MaxStdinBytes)
		} else if !utf8.Valid(b) {
			// JSON would silently replace the invalid bytes.
			return bothy.Errorf(bothy.EINVALID, "standard input is not UTF-8 text, which is all a command's stdin can carry; write it with bothy fs put instead")
		}
		req.Stdin = string(b)
	}
	cmd, err := cl.RunCommand(ctx, args[0], req)
	if err != nil {
		return err
	}
	if *detach {
		if rf.json {
			return c.printJSON(cmd)
		}
		_, err := fmt.Fprintln(c.out, cmd.ID)
		return err
	}
	final, err := c.follow(ctx, cl, cmd.ID, 0, rf.json, true)
	if err != nil {
		return err
	} else if rf.json {
		if err := c.printJSON(final); err != nil {
			return err
		}
	}
	return c.exit(final)
}

// wait waits for a command's end and exits with its exit code.
func (c *cli) wait(ctx context.Context, args []string) error {
	var rf remoteFlags
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy wait CMD_ID", nArgs(1))
	if err != nil {
		return err
	}
	cmd, err := cl.WaitCommand(ctx, args[0])
	if err != nil {
		return err
	} else if rf.json {
		if err := c.printJSON(cmd); err != nil {
			return err
		}
	}
	return c.exit(cmd)
}

// logs prints a command's stored events after --after, or with --follow
// every event until the command's end.
func (c *cli) logs(ctx context.Context, args []string) error {
	var rf remoteFlags
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	after := fs.Int64("after", 0, "print only events with a greater seq")
	follow := fs.Bool("follow", false, "stream events until the command ends")
	cl, args, err := c.verb(fs, &rf, args, -1, "bothy logs CMD_ID [--after N] [--follow]", nArgs(1))
	if err != nil {
		return err
	}
	id := args[0]
	var cmd *bothy.Command
	if *follow {
		if cmd, err = c.follow(ctx, cl, id, *after, rf.json, false); err != nil {
			return err
		}
	} else if cmd, err = c.stored(ctx, cl, id, *after, rf.json); err != nil {
		return err
	}
	if cmd.Error != "" {
		fmt.Fprintf(c.err, "bothy: command %s %s: %s\n", cmd.ID, cmd.State, cmd.Error)
	}
	if rf.json {
		return c.printJSON(cmd)
	}
	return nil
}

// stored prints the events the command has now, after seq after, and
// returns the command: the stream is read up to the LastSeq it had, not
// followed further.
func (c *cli) stored(ctx context.Context, cl *bhttp.Client, id string, after int64, asJSON bool) (*bothy.Command, error) {
	cmd, err := cl.GetCommand(ctx, id)
	if err != nil || after >= cmd.LastSeq {
		return cmd, err
	}
	s, err := cl.Events(ctx, id, after)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	for s.After() < cmd.LastSeq {
		ev, err := s.Next()
		if err == io.EOF {
			return s.Command(), nil
		} else if err != nil {
			return nil, err
		} else if err := c.printEvent(ev, asJSON); err != nil {
			return nil, err
		}
	}
	return cmd, nil
}

// follow prints the command's events after seq after until its end, and
// returns the final command. The client's stream resumes by itself after a
// broken connection. If ctx ends and cancel is set, follow cancels the
// command and follows it to its end, unless interrupted again.
func (c *cli) follow(ctx context.Context, cl *bhttp.Client, id string, after int64, asJSON, cancel bool) (*bothy.Command, error) {
	s, err := cl.Events(ctx, id, after)
	if err != nil {
		return c.interrupted(ctx, cl, id, after, asJSON, cancel, err)
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err == io.EOF {
			return s.Command(), nil
		} else if err != nil {
			return c.interrupted(ctx, cl, id, s.After(), asJSON, cancel, err)
		} else if err := c.printEvent(ev, asJSON); err != nil {
			return nil, err
		}
	}
}

// interrupted handles err, which ended follow: if it came from an
// interrupt (ctx ended) and cancel is set, it cancels the command and
// follows it from after to its end, whose command it returns. Otherwise it
// returns err.
func (c *cli) interrupted(ctx context.Context, cl *bhttp.Client, id string, after int64, asJSON, cancel bool, err error) (*bothy.Command, error) {
	if !cancel || ctx.Err() == nil {
		return nil, err
	}
	fmt.Fprintf(c.err, "bothy: interrupted; cancelling %s (interrupt again to stop waiting)\n", id)
	// A second interrupt ends the wait; the command stays cancelled.
	wctx, stop := signal.NotifyContext(context.WithoutCancel(ctx), os.Interrupt)
	defer stop()
	if _, err := cl.CancelCommand(wctx, id); err != nil {
		return nil, err
	}
	return c.follow(wctx, cl, id, after, asJSON, false)
}

// printEvent writes an event: output to stdout or stderr, or with asJSON
// the event as one line of JSON.
func (c *cli) printEvent(ev *bothy.Event, asJSON bool) error {
	if asJSON {
		return c.printJSON(ev)
	}
	var err error
	switch ev.Kind {
	case bothy.EventStdout:
		_, err = c.out.Write(ev.Data)
	case bothy.EventStderr:
		_, err = c.err.Write(ev.Data)
	case bothy.EventTruncated:
		_, err = fmt.Fprintf(c.err, "bothy: output of %s truncated here; the server keeps the rest in its archive\n", ev.CommandID)
	}
	return err
}

// exit prints why a command did not complete, and returns its exit status
// as an exitCode (nil for 0): see commandExit.
func (c *cli) exit(cmd *bothy.Command) error {
	code, msg := commandExit(cmd)
	if msg != "" {
		fmt.Fprintf(c.err, "bothy: %s\n", msg)
	}
	if code == 0 {
		return nil
	}
	return exitCode(code)
}

// commandExit maps a command's end to bothy's exit status: a completed
// command's exit code (128+N when signal N killed it), 124 for timed_out as
// timeout(1) does, and 1 with a message for failed, cancelled, lost and an
// unfinished command; the message says why the command failed or was lost
// when the server knows (Command.Error).
func commandExit(cmd *bothy.Command) (int, string) {
	switch {
	case cmd.State == bothy.CommandCompleted && cmd.ExitCode != nil:
		return *cmd.ExitCode, ""
	case cmd.State == bothy.CommandCompleted:
		return 1, fmt.Sprintf("command %s completed without an exit code", cmd.ID)
	case cmd.State == bothy.CommandTimedOut:
		return 124, fmt.Sprintf("command %s timed out", cmd.ID)
	case bothy.CommandTerminal(cmd.State) && cmd.Error != "":
		return 1, fmt.Sprintf("command %s did not complete: %s: %s", cmd.ID, cmd.State, cmd.Error)
	case bothy.CommandTerminal(cmd.State):
		return 1, fmt.Sprintf("command %s did not complete: %s", cmd.ID, cmd.State)
	}
	return 1, fmt.Sprintf("command %s has not ended: %s", cmd.ID, cmd.State)
}
