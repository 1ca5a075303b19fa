package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sandbox"
)

// BuildStamp is set by the linker (server.BuildStampFlag) when bothy and
// bothy-supervisor are built together; the agent runs bothy-supervisor
// only when its stamp is bothy's own.
var BuildStamp string

// HandleFile is the name of the encoded sandbox handle in a supervisor
// directory, written by Init and read by Main.
const HandleFile = "handle.json"

// LogFile is the name of the supervisor's log in its directory.
const LogFile = "supervisor.log"

// Init prepares a supervisor directory for a lease: it creates dir (mode
// 0700) and writes the sandbox handle that the supervisor will recover.
// The agent calls it after Provider.Start and before Spawn.
func Init(dir string, h *bothy.SandboxHandle) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create supervisor directory: %w", err)
	}
	b, err := h.Encode()
	if err != nil {
		return fmt.Errorf("encode handle: %w", err)
	}
	tmp := filepath.Join(dir, HandleFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write handle: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, HandleFile)); err != nil {
		return fmt.Errorf("write handle: %w", err)
	}
	return nil
}

// Spawn starts a supervisor for dir, detached from the caller: exe is run
// with args followed by "-dir DIR" (for the bothy binary, args is
// ["supervisor"]), in a new session and process group, with stdin from
// /dev/null and stdout and stderr appended to DIR/supervisor.log, so that
// neither the death of the caller nor a signal to the caller's process
// group reaches it. Spawn returns once the supervisor answers on its
// socket, with its pid and socket path.
func Spawn(ctx context.Context, exe string, args []string, dir string) (int, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, "", fmt.Errorf("create supervisor directory: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, "", fmt.Errorf("open supervisor log: %w", err)
	}
	cmd := exec.Command(exe, append(append([]string(nil), args...), "-dir", dir)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return 0, "", fmt.Errorf("start supervisor: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() // reaps it if it dies while we live

	socket := SocketPath(dir)
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		c, err := Dial(ctx, socket)
		if err == nil {
			c.Close()
			return cmd.Process.Pid, socket, nil
		}
		select {
		case <-exited:
			return 0, "", fmt.Errorf("supervisor exited at start (%s): see %s", cmd.ProcessState, filepath.Join(dir, LogFile))
		case <-ctx.Done():
			cmd.Process.Kill()
			return 0, "", ctx.Err()
		case <-deadline.C:
			cmd.Process.Kill()
			return 0, "", fmt.Errorf("supervisor did not answer on %s: %w", socket, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Main runs a supervisor process: `-dir DIR [-socket PATH] [-handle FILE]
// [-retain BYTES]`. The handle (DIR/handle.json by default) names its
// provider, which must be one of providers. It returns the process's exit
// code. cmd/bothy wires it as `bothy supervisor`.
func Main(args []string, providers ...bothy.Provider) int {
	fs := flag.NewFlagSet("supervisor", flag.ContinueOnError)
	dir := fs.String("dir", "", "the lease's supervisor directory")
	socket := fs.String("socket", "", "unix socket path (default DIR/supervisor.sock)")
	handle := fs.String("handle", "", "encoded sandbox handle file (default DIR/handle.json)")
	retain := fs.Int64("retain", DefaultRetainBytes, "output bytes retained per command")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// What started the supervisor (an agent, by Spawn) gave it only
	// standard input, output and error; a descriptor it inherited anyway
	// reaches none of its commands.
	if err := sandbox.CloseInheritedOnExec(); err != nil {
		log.Error("supervisor", "err", err)
		return 1
	}
	if *dir == "" {
		log.Error("supervisor: -dir is required")
		return 2
	}
	if *handle == "" {
		*handle = filepath.Join(*dir, HandleFile)
	}
	b, err := os.ReadFile(*handle)
	if err != nil {
		log.Error("supervisor: read handle", "err", err)
		return 1
	}
	var h struct{ Provider string }
	json.Unmarshal(b, &h)
	var p bothy.Provider
	for _, q := range providers {
		if q.Name() == h.Provider {
			p = q
		}
	}
	if p == nil {
		log.Error("supervisor: the handle's provider is not available", "provider", h.Provider)
		return 1
	}
	// No signal.Ignore here: an ignored signal stays ignored in the
	// commands it execs. Setsid already leaves it without a terminal.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = Serve(ctx, Config{Dir: *dir, Socket: *socket, Provider: p, Handle: b, RetainBytes: *retain, Logger: log})
	if err != nil {
		log.Error("supervisor", "err", err)
		return 1
	}
	return 0
}

// WaitGone waits until no supervisor holds dir: the lock a supervisor keeps
// on DIR/supervisor.lock for its whole life is free. After Shutdown it
// tells the caller that the process has ended, not only that it was asked
// to. It gives up with an error when ctx is done or after d.
func WaitGone(ctx context.Context, dir string, d time.Duration) error {
	lock, err := os.OpenFile(filepath.Join(dir, "supervisor.lock"), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	defer lock.Close()
	deadline := time.Now().Add(d)
	for {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
			if !running(dir) {
				return nil
			}
		} else if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the supervisor of %s is still running after %s", dir, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Held reports whether a supervisor holds dir: the lock it keeps on
// DIR/supervisor.lock for its whole life is taken. The kernel releases the
// lock when the process dies, whatever killed it, so a supervisor that no
// longer holds its directory is gone (or not yet started).
func Held(dir string) (bool, error) {
	lock, err := os.OpenFile(filepath.Join(dir, "supervisor.lock"), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	defer lock.Close()
	err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		return false, nil
	} else if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// running reports whether the process named by DIR/supervisor.pid is
// alive and not a zombie.
func running(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "supervisor.pid"))
	if err != nil {
		return false
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(b)), "stat"))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

// Terminate sends SIGTERM to the supervisor of dir, for a caller that
// cannot reach it on its socket (Shutdown is the way otherwise): the
// supervisor cancels its commands, journals their end and exits, as at
// Shutdown. It signals only a live process that a supervisor started by
// Spawn would be: the pid written beside the directory's lock while the
// lock is held, whose working directory is dir. It reports whether it
// signalled one; WaitGone then waits for it to end.
func Terminate(dir string) (bool, error) {
	lock, err := os.OpenFile(filepath.Join(dir, "supervisor.lock"), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		return false, nil // no supervisor holds the directory
	} else if !errors.Is(err, syscall.EWOULDBLOCK) {
		return false, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "supervisor.pid"))
	if err != nil {
		return false, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return false, fmt.Errorf("supervisor pid file of %s holds %q", dir, b)
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs) // as the kernel shows a cwd
	}
	if err != nil {
		return false, err
	}
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil || cwd != abs || !running(dir) {
		return false, fmt.Errorf("the process holding %s is not its supervisor %d", dir, pid)
	}
	return true, syscall.Kill(pid, syscall.SIGTERM)
}
