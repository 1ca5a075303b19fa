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
	var readers []*os.File // output read ends, closed by their copiers
	pipeOut := func(dst io.Writer) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("pipe: %w", err)
		}
		if dst == nil {
			dst = io.Discard
		}
		readers = append(readers, r)
		copies.Add(1)
		go copyOutput(dst, r, copies.Done)
		return w, nil
	}
	stdout, err := pipeOut(spec.Stdout)
	if err != nil {
		return nil, err
	}
	stderr, err := pipeOut(spec.Stderr)
	if err != nil {
		stdout.Close()
		readers[0].Close()
		return nil, err
	}
	childEnds := []*os.File{stdout, stderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if spec.Stdin != nil {
		r, w, err := os.Pipe()
		if err != nil {
			stdout.Close()
			stderr.Close()
			detach(readers)
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
		detach(readers)
		copies.Wait()
		return nil, fmt.Errorf("start command: %w", err)
	}
	if opt.Started != nil {
		opt.Started(cmd.Process.Pid)
	}
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
	settle := outputSettle
	if res.TimedOut || ctxErr != nil {
		signal(syscall.SIGKILL)
		settle = outputGrace
	}

	drained := make(chan struct{})
	go func() { copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(settle):
		detach(readers)
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
	if opt.FileSizeLimit {
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

// copyOutput copies r to dst until EOF, or until detach sets a past read
// deadline on r: it then copies what r still buffers (all that was written
// before the detach), calls done, and reads and discards the rest until
// EOF, so that a writer that outlives the command never gets EPIPE.
func copyOutput(dst io.Writer, r *os.File, done func()) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			dst.Write(buf[:n])
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			done()
			return
		}
		r.SetReadDeadline(time.Time{})
		eof := drainBuffered(dst, r, buf)
		done()
		if !eof {
			io.Copy(io.Discard, r)
		}
		return
	}
}

// drainBuffered copies what the pipe r holds now to dst without blocking
// and reports whether it reached EOF.
func drainBuffered(dst io.Writer, r *os.File, buf []byte) (eof bool) {
	rc, err := r.SyscallConn()
	if err != nil {
		return false
	}
	rc.Read(func(fd uintptr) bool {
		for {
			n, err := unix.Read(int(fd), buf)
			if n > 0 {
				dst.Write(buf[:n])
				continue
			}
			eof = n == 0 && err == nil
			return true
		}
	})
	return eof
}

// detach makes the copiers of readers hand over what is buffered and stop
// writing to their destinations.
func detach(readers []*os.File) {
	for _, r := range readers {
		r.SetReadDeadline(time.Now().Add(-time.Second))
	}
}
