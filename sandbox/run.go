package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
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

// outputSettle is how long Run waits for the output pipes to close after
// the main process exited normally, before it detaches them from a
// background process that still holds them.
const outputSettle = 20 * time.Millisecond

// MemorySampleInterval is how often Run samples RunOptions.Memory while a
// command runs.
const MemorySampleInterval = 200 * time.Millisecond

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
	// Memory, if set, returns the memory that the command's processes
	// hold now, in bytes. Run calls it once the command has started, every
	// MemorySampleInterval while it runs and once when its main process
	// has exited, and fills Usage.MemoryByteSeconds with the samples
	// integrated over time and Usage.PeakMemoryBytes with the largest;
	// a provider that has a better peak raises it. It is called from one
	// goroutine, after Started.
	Memory func() int64
	// FileSizeLimit tells Run that the command runs under RLIMIT_FSIZE
	// (Limits.ScratchBytes): Run then sets DiskLimited when the command
	// was killed by SIGXFSZ, or exited 128+SIGXFSZ, as a shell does when
	// that signal killed the command it ran last.
	FileSizeLimit bool
}

// Run starts cmd with spec's standard input and output, waits for its main
// process, and enforces spec.Timeout and ctx. It is the plumbing shared by
// the providers; cmd's Stdin, Stdout and Stderr are set here.
//
// At the timeout, or when ctx is done, Run sends SIGTERM to the tree and
// SIGKILL after the grace period, and SIGKILL again once the main process
// has exited, so that nothing of a killed command survives. When the main
// process exits on its own, Run signals nothing: what the command left
// running in the background goes on. Run returns once everything the main
// process wrote has been copied to spec.Stdout and spec.Stderr. If a
// process that goes on still holds the output pipes, Run detaches them:
// what it writes later is read and discarded until it closes them, so it
// never gets EPIPE. If ctx was done, Run returns the result together with
// ctx's error. Run fills Usage.WallMillis, and the memory fields if
// opt.Memory is set; the rest of Usage is the provider's.
func Run(ctx context.Context, cmd *exec.Cmd, spec bothy.ExecSpec, opt RunOptions) (*bothy.ExecResult, error) {
	if opt.Grace <= 0 {
		opt.Grace = DefaultKillGrace
	}
	out, err := connect(cmd, spec)
	if err != nil {
		return nil, err
	}
	defer out.close()
	start := time.Now()
	if err := out.start(cmd); err != nil {
		return nil, err
	}
	if opt.Started != nil {
		opt.Started(cmd.Process.Pid)
	}
	res, ctxErr, waitErr := watch(ctx, cmd, spec.Timeout, opt, start)
	settle := outputSettle
	if res.TimedOut || ctxErr != nil {
		opt.Signal(syscall.SIGKILL)
		settle = outputGrace
	}
	out.drain(settle)
	return exitStatus(cmd, res, waitErr, ctxErr, opt.FileSizeLimit)
}

// watch waits for the main process of cmd, started at start, while it
// enforces the timeout and ctx and samples opt.Memory. It returns the
// result with TimedOut, Duration and Usage filled, ctx's error if ctx was
// done, and the error of cmd.Wait.
func watch(ctx context.Context, cmd *exec.Cmd, timeout time.Duration, opt RunOptions, start time.Time) (res *bothy.ExecResult, ctxErr, waitErr error) {
	var mem memoryMeter
	var sample <-chan time.Time
	if opt.Memory != nil {
		mem.sample(opt.Memory(), start)
		t := time.NewTicker(MemorySampleInterval)
		defer t.Stop()
		sample = t.C
	}
	kill := func(sig syscall.Signal) {
		if sig == syscall.SIGKILL {
			cmd.Process.Signal(sig)
		}
		opt.Signal(sig)
	}

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var expired, killAt <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	ctxDone := ctx.Done()
	res = &bothy.ExecResult{}
	term := func() {
		kill(syscall.SIGTERM)
		killAt = time.After(opt.Grace)
	}
wait:
	for {
		select {
		case waitErr = <-done:
			break wait
		case <-expired:
			expired = nil
			res.TimedOut = true
			term()
		case <-ctxDone:
			ctxDone = nil
			ctxErr = ctx.Err()
			term()
		case <-killAt:
			killAt = nil
			kill(syscall.SIGKILL)
		case now := <-sample:
			mem.sample(opt.Memory(), now)
		}
	}
	res.Duration = time.Since(start)
	res.Usage.WallMillis = res.Duration.Milliseconds()
	if opt.Memory != nil {
		mem.sample(opt.Memory(), start.Add(res.Duration))
		res.Usage.PeakMemoryBytes = mem.peak
		res.Usage.MemoryByteSeconds = int64(mem.byteSeconds)
	}
	return res, ctxErr, waitErr
}

// exitStatus fills res's exit code, signal and DiskLimited from how the
// main process of cmd ended, and returns it with ctx's error, if any.
func exitStatus(cmd *exec.Cmd, res *bothy.ExecResult, waitErr, ctxErr error, fileSizeLimit bool) (*bothy.ExecResult, error) {
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
	if fileSizeLimit {
		res.DiskLimited = res.Signal == "SIGXFSZ" || res.Signal == "" && res.ExitCode == 128+int(syscall.SIGXFSZ)
	}
	if ctxErr != nil {
		return res, fmt.Errorf("run command: %w", ctxErr)
	}
	return res, nil
}

// memoryMeter integrates memory samples over time, linearly between
// samples.
type memoryMeter struct {
	last        time.Time
	lastBytes   int64
	peak        int64
	byteSeconds float64 // bytes times nanoseconds would overflow an int64
}

func (m *memoryMeter) sample(bytes int64, now time.Time) {
	if !m.last.IsZero() {
		m.byteSeconds += float64(m.lastBytes+bytes) / 2 * now.Sub(m.last).Seconds()
	}
	m.last, m.lastBytes, m.peak = now, bytes, max(m.peak, bytes)
}

// MarkKilled sets res.Signal to SIGKILL where the command's main process,
// an enter program or runsc that reports the command's end as an exit
// status, exited 128+SIGKILL because a memory limit or a timeout killed
// the command.
func MarkKilled(res *bothy.ExecResult) {
	if res.Signal == "" && res.ExitCode == 128+int(syscall.SIGKILL) && (res.OOMKilled || res.TimedOut) {
		res.Signal = "SIGKILL"
	}
}
