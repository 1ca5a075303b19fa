// Package supervisor is the per-lease supervisor: a process, detached from
// the agent, that runs a lease's commands through a bothy.Provider,
// journals their events on local disk before anyone reads them, and
// answers over a unix socket, so that a crash of the agent or of the
// control plane loses no output and never runs a command twice. See
// docs/supervisor.md for the protocol, the journal format and the states
// after each kind of crash.
package supervisor

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
)

// Defaults of Config.
const (
	DefaultRetainBytes  = 16 << 20
	DefaultSyncInterval = 100 * time.Millisecond
)

// MarkEnv is set in every command's environment to the lease directory's
// mark (DIR/mark), so that a restarted supervisor can find and kill the
// processes that the dead one left behind. The mark is a random value
// that grants nothing: nothing accepts it as a credential, so a user
// process that reads it from its environment learns nothing it could
// use. (The socket is guarded by its mode, see docs/supervisor.md.)
const MarkEnv = "BOTHY_LEASE_MARK"

// Config configures Serve.
type Config struct {
	// Dir is the lease's supervisor directory: the journals, the lock, the
	// mark and, by default, the socket live in it.
	Dir string
	// Socket is the unix socket path; "" is SocketPath(Dir).
	Socket string
	// Provider runs the commands, in the sandbox of Handle.
	Provider bothy.Provider
	// Handle is the encoded sandbox handle (SandboxHandle.Encode) that the
	// supervisor gives to Provider.Recover at start.
	Handle []byte
	// RetainBytes bounds the output kept per command; zero is
	// DefaultRetainBytes.
	RetainBytes int64
	// SyncInterval is how often written output is fsynced; zero is
	// DefaultSyncInterval.
	SyncInterval time.Duration
	Logger       *slog.Logger
}

// maxSocketPath is the longest unix socket path that bind(2) takes
// (sun_path is 108 bytes, NUL included), with a margin.
const maxSocketPath = 100

// lockWait is how long a starting supervisor waits for the directory's
// lock before it concludes that another supervisor holds it.
const lockWait = 3 * time.Second

// SocketPath returns the default socket path of a supervisor directory:
// DIR/supervisor.sock, or, when that is too long for a unix socket, a path
// derived from DIR's absolute path in a directory of the caller's uid under
// the temporary directory (mode 0700), the same for every process that
// asks.
func SocketPath(dir string) string {
	p := filepath.Join(dir, "supervisor.sock")
	if len(p) <= maxSocketPath {
		return p
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(socketDir(), hex.EncodeToString(sum[:12])+".sock")
}

// socketDir is where sockets of long directories live.
func socketDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("bothy-sup-%d", os.Getuid()))
}

// prepareSocketDir creates the directory of socket, when it is socketDir,
// mode 0700, and checks that it is the caller's and not open to others.
func prepareSocketDir(socket string) error {
	dir := filepath.Dir(socket)
	if dir != socketDir() {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("socket directory %s must be a directory of uid %d with mode 0700", dir, os.Getuid())
	}
	return nil
}

type server struct {
	cfg     Config
	log     *slog.Logger
	h       *bothy.SandboxHandle
	cmdDir  string
	mark    string          // MarkEnv's value
	runCtx  context.Context // parent of every command's context
	stopRun context.CancelFunc

	mu       sync.Mutex
	cmds     map[string]*command
	stopping bool
	runs     sync.WaitGroup
	shutdown chan struct{}
	once     sync.Once
}

type command struct {
	j         *journal
	cancel    context.CancelFunc // nil once ended
	cancelled bool               // under server.mu
	// diskLimited: the cancel was for the scratch limit (under server.mu).
	diskLimited bool
}

// Serve runs a supervisor until ctx is done or a client asks it to shut
// down; either way it first cancels the running commands and journals
// their exit. At start it takes an exclusive lock on Dir (a second
// supervisor on the same directory fails), kills processes left behind by
// a previous supervisor of Dir, and marks every command that has no
// terminal record as lost: such a command is never run again.
func Serve(ctx context.Context, cfg Config) error {
	s := newServer(cfg)
	if err := os.MkdirAll(s.cmdDir, 0o700); err != nil {
		return fmt.Errorf("create supervisor directory: %w", err)
	}
	lock, err := lockDir(s.cfg.Dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := s.takeOver(ctx); err != nil {
		return err
	}
	ln, err := listen(s.cfg.Socket)
	if err != nil {
		return err
	}
	s.runCtx, s.stopRun = context.WithCancel(context.Background())
	defer s.stopRun()
	srvCtx, stopSrv := context.WithCancel(context.Background())
	var conns sync.WaitGroup
	go s.accept(srvCtx, ln, &conns)
	go s.flush(srvCtx)
	s.log.Info("supervisor serving", "socket", s.cfg.Socket, "lease", s.h.LeaseID, "pid", os.Getpid())

	select {
	case <-ctx.Done():
	case <-s.shutdown:
	}
	s.stopCommands()
	ln.Close()
	os.Remove(s.cfg.Socket)
	stopSrv()
	conns.Wait()
	s.log.Info("supervisor stopped")
	return nil
}

// newServer returns the server of cfg, with cfg's defaults filled in.
func newServer(cfg Config) *server {
	if cfg.Socket == "" {
		cfg.Socket = SocketPath(cfg.Dir)
	}
	if cfg.RetainBytes <= 0 {
		cfg.RetainBytes = DefaultRetainBytes
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	s := &server{cfg: cfg, log: cfg.Logger, cmdDir: filepath.Join(cfg.Dir, "commands"), cmds: make(map[string]*command), shutdown: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// lockDir takes the exclusive lock of a supervisor directory and writes
// the pid beside it; the lock holds until the returned file is closed.
func lockDir(dir string) (*os.File, error) {
	lock, err := os.OpenFile(filepath.Join(dir, "supervisor.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	// A supervisor that was just killed may hold the lock a moment longer
	// (its exit, or a child between fork and exec still sharing the
	// descriptor), so a restart waits briefly; a live one keeps it.
	for deadline := time.Now().Add(lockWait); ; {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		} else if time.Now().After(deadline) {
			lock.Close()
			return nil, bothy.Errorf(bothy.ECONFLICT, "another supervisor holds %s", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The pid lets WaitGone see the process itself end, which happens a
	// little after the lock is released.
	if err := os.WriteFile(filepath.Join(dir, "supervisor.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		lock.Close()
		return nil, fmt.Errorf("write pid: %w", err)
	}
	return lock, nil
}

// takeOver takes over from a previous supervisor of the directory: it
// reattaches to the sandbox, kills the processes left with the
// directory's mark and loads the journals.
func (s *server) takeOver(ctx context.Context) error {
	var err error
	if s.mark, err = readMark(s.cfg.Dir); err != nil {
		return err
	}
	if s.h, err = s.cfg.Provider.Recover(ctx, s.cfg.Handle); err != nil {
		return fmt.Errorf("recover sandbox: %w", err)
	}
	if n := killMarked(s.cfg.Dir, s.mark); n > 0 {
		s.log.Warn("killed processes left by a previous supervisor", "count", n)
	}
	return s.load()
}

// listen listens on the unix socket, which only the caller's uid may use.
func listen(socket string) (net.Listener, error) {
	if err := prepareSocketDir(socket); err != nil {
		return nil, err
	}
	os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	return ln, nil
}

// accept serves each connection of ln until ln is closed; conns counts
// the connections being served, each closed when ctx is done.
func (s *server) accept(ctx context.Context, ln net.Listener, conns *sync.WaitGroup) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			s.handle(ctx, conn)
		}()
	}
}

// stopCommands refuses new runs, cancels the running commands and waits
// until each has journaled its exit; the provider bounds the kill.
func (s *server) stopCommands() {
	s.mu.Lock()
	s.stopping = true
	for _, c := range s.cmds {
		if c.cancel != nil {
			c.cancelled = true
			c.cancel()
		}
	}
	s.mu.Unlock()
	s.runs.Wait()
}

// load opens every journal of Dir and ends those without a terminal record.
func (s *server) load() error {
	entries, err := os.ReadDir(s.cmdDir)
	if err != nil {
		return fmt.Errorf("read journals: %w", err)
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".journal")
		if !ok {
			continue
		}
		j, err := openJournal(s.cmdDir, id, s.cfg.RetainBytes)
		if err != nil {
			// A journal without a whole accept record was never acknowledged
			// to anyone, and its command never started.
			s.log.Error("unreadable journal", "command", id, "err", err)
			continue
		}
		if j.terminal == nil {
			b, _ := json.Marshal(FinalState{State: bothy.RunLost, Reason: "the supervisor died while the command ran; its processes were killed"})
			if err := j.finish(kindState, b); err != nil {
				return fmt.Errorf("mark command %s lost: %w", id, err)
			}
			s.log.Warn("command lost with the previous supervisor", "command", id)
		}
		s.cmds[id] = &command{j: j}
	}
	return nil
}

// flush fsyncs running commands' output every SyncInterval.
func (s *server) flush(ctx context.Context) {
	t := time.NewTicker(s.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		var js []*journal
		for _, c := range s.cmds {
			if c.cancel != nil {
				js = append(js, c.j)
			}
		}
		s.mu.Unlock()
		for _, j := range js {
			if err := j.sync(); err != nil {
				s.log.Error("sync journal", "err", err)
			}
		}
	}
}

func (s *server) handle(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	line, err := bufio.NewReaderSize(io.LimitReader(conn, 4*bothy.MaxStdinBytes), 64<<10).ReadBytes('\n')
	if err != nil {
		return
	}
	w := bufio.NewWriterSize(conn, 64<<10)
	reply := func(resp *Response) error {
		b, _ := json.Marshal(resp)
		w.Write(append(b, '\n'))
		return w.Flush()
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		reply(&Response{Error: bothy.Errorf(bothy.EINVALID, "malformed request: %v", err)})
		return
	}
	if req.Op != OpHello && req.Op != OpShutdown {
		if err := bothy.ValidateID("command id", req.CommandID); err != nil {
			reply(&Response{Error: err.(*bothy.Error)})
			return
		}
	}
	var resp Response
	switch req.Op {
	case OpHello:
		resp.Lease = s.h.LeaseID
	case OpRun:
		resp.Status, err = s.run(req.CommandID, &req.RunSpec)
	case OpStatus:
		resp.Status = s.status(req.CommandID, false)
	case OpAck:
		err = s.ack(req.CommandID, req.Seq)
	case OpCancel:
		resp.Status, err = s.cancel(req.CommandID, req.DiskLimited)
	case OpShutdown:
		s.once.Do(func() { close(s.shutdown) })
	case OpEvents:
		c := s.lookup(req.CommandID)
		if c == nil {
			reply(&Response{Error: bothy.Errorf(bothy.ENOTFOUND, "command %s was never seen", req.CommandID)})
			return
		}
		if reply(&Response{}) != nil {
			return
		}
		if err := s.stream(ctx, c.j, req.After, w); err != nil && ctx.Err() == nil {
			s.log.Debug("event stream ended", "command", req.CommandID, "err", err)
		}
		return
	default:
		err = bothy.Errorf(bothy.EINVALID, "unknown op %q", req.Op)
	}
	if err != nil {
		var e *bothy.Error
		if !errors.As(err, &e) {
			s.log.Error("request failed", "op", req.Op, "err", err)
			e = bothy.Errorf(bothy.EINTERNAL, "internal error")
		}
		resp = Response{Error: e}
	}
	reply(&resp)
}

func (s *server) lookup(id string) *command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmds[id]
}

func (s *server) status(id string, existing bool) *Status {
	c := s.lookup(id)
	st := &Status{CommandID: id, State: bothy.RunNeverSeen}
	if c == nil {
		return st
	}
	st.Existing = existing
	st.AckedSeq = readAck(s.cmdDir, id)
	j := c.j
	j.mu.Lock()
	defer j.mu.Unlock()
	st.LastSeq, st.Truncated = j.lastSeq, j.truncated
	switch t := j.terminal; {
	case t == nil:
		st.State = bothy.RunRunning
	case t.Kind == kindExit:
		st.State = bothy.RunFinished
		st.Exit = new(bothy.Exit)
		json.Unmarshal(t.Data, st.Exit)
	default:
		var f FinalState
		json.Unmarshal(t.Data, &f)
		st.State, st.Error = f.State, f.Error
	}
	return st
}

func (s *server) cancel(id string, diskLimited bool) (*Status, error) {
	s.mu.Lock()
	c := s.cmds[id]
	if c == nil {
		s.mu.Unlock()
		return nil, bothy.Errorf(bothy.ENOTFOUND, "command %s was never seen", id)
	}
	if c.cancel != nil {
		c.cancelled = true
		c.diskLimited = c.diskLimited || diskLimited
		c.cancel()
	}
	s.mu.Unlock()
	return s.status(id, false), nil
}

// ack records the highest acknowledged seq of a command, in a file beside
// its journal. It is not fsynced: an ack lost in a crash only means events
// are sent again, which the control plane deduplicates by seq.
func (s *server) ack(id string, seq int64) error {
	c := s.lookup(id)
	if c == nil {
		return bothy.Errorf(bothy.ENOTFOUND, "command %s was never seen", id)
	}
	c.j.mu.Lock()
	last := c.j.lastSeq
	c.j.mu.Unlock()
	if seq < 0 || seq > last {
		return bothy.Errorf(bothy.EINVALID, "ack %d is outside the command's events (last seq %d)", seq, last)
	}
	if seq <= readAck(s.cmdDir, id) {
		return nil
	}
	path := filepath.Join(s.cmdDir, id+".ack")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(seq, 10)), 0o600); err != nil {
		return fmt.Errorf("write ack: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write ack: %w", err)
	}
	return nil
}

func readAck(dir, id string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, id+".ack"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(b), 10, 64)
	return n
}

// stream writes the events after seq after from the journal file, then
// follows the journal until its terminal record. It holds at most one
// record in memory: a reader that does not keep up blocks its own
// connection, while the command goes on appending to disk.
func (s *server) stream(ctx context.Context, j *journal, after int64, w *bufio.Writer) error {
	f, err := os.Open(j.path)
	if err != nil {
		return err
	}
	defer f.Close()
	enc := json.NewEncoder(w)
	var off int64
	for {
		size, done, notify := j.snapshot()
		for off < size {
			rec, n, err := readRecord(f, off, size, after)
			if err != nil {
				return fmt.Errorf("read journal %s at %d: %w", j.id, off, err)
			}
			off += n
			if rec.Kind == kindAccept || rec.Seq <= after {
				continue
			}
			if err := enc.Encode(rec.event(j.id)); err != nil {
				return err
			}
			if rec.Kind == kindExit || rec.Kind == kindState {
				return w.Flush()
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
