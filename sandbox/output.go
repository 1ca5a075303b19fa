package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
)

// streams are the pipes of a command that Run started: its output, copied
// to the spec's writers until the command's processes close it, and its
// input, fed from the spec's reader.
type streams struct {
	copies  sync.WaitGroup
	readers []*os.File // output read ends, closed by their copiers
	child   []*os.File // the command's ends, closed once it started
	closers []*os.File // parent ends to close when the command is gone
}

// connect gives cmd pipes for its standard output and error, copied to
// spec.Stdout and spec.Stderr (discarded where nil), and for its standard
// input from spec.Stdin, if it has one.
func connect(cmd *exec.Cmd, spec bothy.ExecSpec) (*streams, error) {
	s := &streams{}
	stdout, err := s.output(spec.Stdout)
	if err != nil {
		return nil, err
	}
	stderr, err := s.output(spec.Stderr)
	if err != nil {
		stdout.Close()
		s.readers[0].Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if spec.Stdin != nil {
		r, w, err := os.Pipe()
		if err != nil {
			stdout.Close()
			stderr.Close()
			detach(s.readers)
			return nil, fmt.Errorf("pipe: %w", err)
		}
		s.closers = append(s.closers, w)
		s.child = append(s.child, r)
		cmd.Stdin = r
		go func() {
			io.Copy(w, spec.Stdin)
			w.Close()
		}()
	}
	return s, nil
}

// output returns the write end of a pipe whose read end a goroutine
// copies to dst.
func (s *streams) output(dst io.Writer) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	if dst == nil {
		dst = io.Discard
	}
	s.readers = append(s.readers, r)
	s.child = append(s.child, w)
	s.copies.Add(1)
	go copyOutput(dst, r, s.copies.Done)
	return w, nil
}

// start starts cmd and closes the command's ends of the pipes, which it
// now holds.
func (s *streams) start(cmd *exec.Cmd) error {
	err := cmd.Start()
	for _, f := range s.child {
		f.Close()
	}
	if err != nil {
		detach(s.readers)
		s.copies.Wait()
		return fmt.Errorf("start command: %w", err)
	}
	return nil
}

// drain waits until everything the command wrote has been copied: until
// its processes have closed the output pipes or, after settle, detaches
// the pipes from those that go on and returns once what they had written
// is copied.
func (s *streams) drain(settle time.Duration) {
	drained := make(chan struct{})
	go func() { s.copies.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(settle):
		detach(s.readers)
		<-drained
	}
}

// close closes the parent's ends of the input pipe.
func (s *streams) close() {
	for _, f := range s.closers {
		f.Close()
	}
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
