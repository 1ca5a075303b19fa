package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
)

// DefaultKillGrace is how long a command's tree has between SIGTERM and
// SIGKILL when it times out or is cancelled.
const DefaultKillGrace = 2 * time.Second

// outputGrace bounds the wait for a command's output pipes to close once
// its tree has been killed; a process that escaped the tree may hold them.
const outputGrace = 2 * time.Second

// RunOptions are the provider's part of Run.
type RunOptions struct {
	// Grace is the time between SIGTERM and SIGKILL; zero means
	// DefaultKillGrace.
	Grace time.Duration
	// Started, if set, is called with the main process's pid once it has
	// started, before any Signal.
	Started func(pid int)
	// Signal delivers a signal to every process of the command's tree.
	// Run also sends SIGKILL, but not SIGTERM, to the main process itself:
	// a provider whose main process is a sandbox monitor may spare it
	// SIGTERM so that the command inside gets its grace period.
	Signal func(syscall.Signal)
}

// Run starts cmd with spec's standard input and output, waits for its main
// process, and enforces spec.Timeout and ctx. It is the plumbing shared by
// the providers; cmd's Stdin, Stdout and Stderr are set here.
//
// At the timeout, or when ctx is done, Run sends SIGTERM to the tree and
// SIGKILL after the grace period. When the main process exits, Run sends SIGKILL to
// the tree so that nothing the command started outlives it. Run returns
// once the output pipes are drained, or outputGrace after the kill if an
// escaped process still holds them. If ctx was done, Run returns the result
// together with ctx's error.
func Run(ctx context.Context, cmd *exec.Cmd, spec bothy.ExecSpec, opt RunOptions) (*bothy.ExecResult, error) {
	grace, signal := opt.Grace, opt.Signal
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	var closers []*os.File // parent ends to close when the command is gone
	defer func() {
		for _, f := range closers {
			f.Close()
		}
	}()
	var copies sync.WaitGroup
	pipeOut := func(dst io.Writer) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("pipe: %w", err)
		}
		if dst == nil {
			dst = io.Discard
		}
		closers = append(closers, r)
		copies.Go(func() { io.Copy(dst, r) })
		return w, nil
	}
	stdout, err := pipeOut(spec.Stdout)
	if err != nil {
		return nil, err
	}
	stderr, err := pipeOut(spec.Stderr)
	if err != nil {
		stdout.Close()
		return nil, err
	}
	childEnds := []*os.File{stdout, stderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if spec.Stdin != nil {
		r, w, err := os.Pipe()
		if err != nil {
			stdout.Close()
			stderr.Close()
			return nil, fmt.Errorf("pipe: %w", err)
		}
		closers = append(closers, w)
		childEnds = append(childEnds, r)
		cmd.Stdin = r
		go func() {
			io.Copy(w, spec.Stdin)
			w.Close()
		}()
	}

	start := time.Now()
	err = cmd.Start()
	for _, f := range childEnds {
		f.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("start command: %w", err)
	}
	if opt.Started != nil {
		opt.Started(cmd.Process.Pid)
	}
	kill := func(sig syscall.Signal) {
		if sig == syscall.SIGKILL {
			cmd.Process.Signal(sig)
		}
		signal(sig)
	}

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout, killAt <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	ctxDone := ctx.Done()
	res := &bothy.ExecResult{}
	var ctxErr, waitErr error
	term := func() {
		kill(syscall.SIGTERM)
		killAt = time.After(grace)
	}
wait:
	for {
		select {
		case waitErr = <-done:
			break wait
		case <-timeout:
			timeout = nil
			res.TimedOut = true
			term()
		case <-ctxDone:
			ctxDone = nil
			ctxErr = ctx.Err()
			term()
		case <-killAt:
			killAt = nil
			kill(syscall.SIGKILL)
		}
	}
	res.Duration = time.Since(start)
	signal(syscall.SIGKILL)

	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputGrace):
		for _, f := range closers {
			f.Close()
		}
		<-drained
	}

	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		return nil, fmt.Errorf("wait for command: %w", waitErr)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.ExitCode = 128 + int(ws.Signal())
		res.Signal = unix.SignalName(ws.Signal())
	} else {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	if ctxErr != nil {
		return res, fmt.Errorf("run command: %w", ctxErr)
	}
	return res, nil
}
