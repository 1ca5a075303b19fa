// Package process implements bothy.Provider with plain child processes, for
// development and for paired machines that their owner trusts.
//
// It isolates nothing. A command runs as the agent's own user, with the
// agent's privileges, and can read, write and reach everything that user
// can: other workspaces, the host's files, the network. It has no memory,
// pids or CPU limits. What it does do: each command runs in its own process
// group with its working directory confined under the workspace (a Cwd that
// escapes, lexically or through a symlink, is refused), a minimal
// environment rather than the agent's, and a timeout that kills the whole
// process group. Limits.ScratchBytes is the command's RLIMIT_FSIZE and
// Limits.OpenFiles its RLIMIT_NOFILE (set by prlimit), and with LeaseSpec.NetNS the command runs in that network
// namespace (entered by nsenter, which needs the agent to be root); without
// one, commands share the agent's network. A command's Usage is its rusage
// (CPU time; the peak resident set of its largest process) and the resident
// memory of its process group, sampled.
//
// What a command leaves running in its group goes on until
// Stop kills the group. A process that leaves its group (setsid, a double
// fork into a new session) escapes even that; so does one whose group
// leader a provider of another agent process started (Stop kills only the
// groups this Provider started). Never offer it to tenants who are
// not the machine's owner.
package process

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sandbox"
)

// Name is the provider's name.
const Name = "process"

var _ bothy.Provider = (*Provider)(nil)

// Provider runs commands as child processes of the agent.
type Provider struct {
	// KillGrace is the time between SIGTERM and SIGKILL at a timeout or
	// cancel; zero means sandbox.DefaultKillGrace.
	KillGrace time.Duration

	mu     sync.Mutex
	leases map[string]map[int]struct{} // lease id → process groups that may still run
}

// New returns a process provider.
func New() *Provider {
	return &Provider{leases: make(map[string]map[int]struct{})}
}

// Name returns "process".
func (p *Provider) Name() string { return Name }

// Start checks the workspace and registers the lease. It starts nothing.
func (p *Provider) Start(ctx context.Context, spec bothy.LeaseSpec) (*bothy.SandboxHandle, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := checkDir(spec.Workspace); err != nil {
		return nil, err
	}
	if err := checkNetNS(spec.NetNS); err != nil {
		return nil, err
	}
	if spec.Limits.ScratchBytes > 0 || spec.Limits.OpenFiles > 0 {
		if _, err := exec.LookPath("prlimit"); err != nil {
			return nil, fmt.Errorf("the process provider limits file sizes and open files with prlimit, which is missing")
		}
	}
	h, err := bothy.NewSandboxHandle(Name, spec, nil)
	if err != nil {
		return nil, fmt.Errorf("new handle: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.leases[spec.LeaseID]; ok {
		return nil, bothy.Errorf(bothy.ECONFLICT, "lease %s is already started", spec.LeaseID)
	}
	p.leases[spec.LeaseID] = make(map[int]struct{})
	return h, nil
}

// Exec runs the command as a child process in its own process group.
func (p *Provider) Exec(ctx context.Context, h *bothy.SandboxHandle, spec bothy.ExecSpec) (*bothy.ExecResult, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Limits != (bothy.Limits{}) {
		return nil, bothy.Errorf(bothy.EINVALID, "the process provider limits a lease, not a single command")
	}
	dir, err := confine(h.Workspace, spec.Cwd)
	if err != nil {
		return nil, err
	}
	argv := spec.Argv
	if spec.Script != "" {
		argv = []string{"bash", "-c", spec.Script}
	}
	// prlimit and nsenter exec the command: its pid, group and rusage
	// are theirs.
	if n := h.Limits.ScratchBytes; n > 0 {
		argv = append([]string{"prlimit", fmt.Sprintf("--fsize=%d:%d", n, n), "--"}, argv...)
	}
	if n := h.Limits.OpenFiles; n > 0 {
		argv = append([]string{"prlimit", fmt.Sprintf("--nofile=%d:%d", n, n), "--"}, argv...)
	}
	if h.NetNS != "" {
		argv = append([]string{"nsenter", "--net=" + h.NetNS, "--"}, argv...)
	}
	files, fileEnv, err := sandbox.SecretFiles(spec.SecretFiles, 3)
	if err != nil {
		return nil, err
	}
	defer sandbox.CloseAll(files)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = environ(h.Workspace, h.Env, spec.Env, fileEnv)
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	p.mu.Lock()
	groups, ok := p.leases[h.LeaseID]
	p.mu.Unlock()
	if !ok {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s is not running", h.LeaseID)
	}
	// The group is registered as soon as it exists, so that Stop finds it;
	// if Stop ran in between, the group is killed at once.
	var pgid int
	res, err := sandbox.Run(ctx, cmd, spec, sandbox.RunOptions{
		Grace: p.KillGrace,
		Started: func(pid int) {
			p.mu.Lock()
			defer p.mu.Unlock()
			pgid = pid
			groups[pid] = struct{}{}
			if _, ok := p.leases[h.LeaseID]; !ok {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		},
		Signal:        func(sig syscall.Signal) { syscall.Kill(-pgid, sig) },
		Memory:        func() int64 { return groupMemory(pgid) },
		FileSizeLimit: h.Limits.ScratchBytes > 0,
	})
	if res != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			res.Usage.CPUMicros = ru.Utime.Nano()/1000 + ru.Stime.Nano()/1000
			// ru_maxrss is in KiB: the largest of the process and its
			// waited-for descendants.
			res.Usage.PeakMemoryBytes = max(res.Usage.PeakMemoryBytes, ru.Maxrss*1024)
		}
	}
	// A group that still has processes (the command's background) stays
	// registered for Stop.
	wait := 10 * time.Millisecond
	if err != nil || res != nil && res.TimedOut {
		wait = time.Second // the group was killed; let it go
	}
	if pgid != 0 && waitGroupGone(pgid, wait) {
		p.mu.Lock()
		delete(groups, pgid)
		p.mu.Unlock()
	}
	return res, err
}

// Stop kills every process group that the lease's commands are running
// and checks that none remains.
func (p *Provider) Stop(ctx context.Context, h *bothy.SandboxHandle) (*bothy.Residue, error) {
	p.mu.Lock()
	groups := p.leases[h.LeaseID]
	delete(p.leases, h.LeaseID)
	var pgids []int
	for g := range groups {
		pgids = append(pgids, g)
	}
	p.mu.Unlock()
	res := &bothy.Residue{}
	for _, g := range pgids {
		syscall.Kill(-g, syscall.SIGKILL)
	}
	for _, g := range pgids {
		if !waitGroupGone(g, 2*time.Second) {
			res.Processes = append(res.Processes, g)
		}
	}
	sort.Ints(res.Processes)
	if !res.Empty() {
		return res, fmt.Errorf("stop lease %s: process groups %v remain", h.LeaseID, res.Processes)
	}
	return res, nil
}

// Recover reattaches to a lease's workspace. It cannot find the background
// processes that another Provider's commands left running.
func (p *Provider) Recover(ctx context.Context, handle []byte) (*bothy.SandboxHandle, error) {
	h, err := bothy.DecodeSandboxHandle(handle, Name)
	if err != nil {
		return nil, err
	}
	if err := checkDir(h.Workspace); err != nil {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "workspace of lease %s is gone", h.LeaseID)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.leases[h.LeaseID]; !ok {
		p.leases[h.LeaseID] = make(map[int]struct{})
	}
	return h, nil
}

// checkNetNS checks that a lease's network namespace, if it has one, can
// be joined: nsenter needs root.
func checkNetNS(path string) error {
	if path == "" {
		return nil
	}
	if os.Geteuid() != 0 {
		return bothy.Errorf(bothy.EINVALID, "the process provider joins a network namespace with nsenter, which needs root")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return bothy.Errorf(bothy.EINVALID, "the process provider joins a network namespace with nsenter, which is missing")
	}
	return sandbox.CheckNetNS(path)
}

// groupMemory returns the resident memory of the processes of group pgid.
func groupMemory(pgid int) int64 {
	entries, _ := os.ReadDir("/proc")
	var pages int64
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold spaces; pgrp and rss
		// are fields 5 and 24.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 22 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		n, _ := strconv.ParseInt(f[21], 10, 64)
		pages += n
	}
	return pages * int64(os.Getpagesize())
}

func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return bothy.Errorf(bothy.EINVALID, "workspace %s: %v", dir, err)
	} else if !fi.IsDir() {
		return bothy.Errorf(bothy.EINVALID, "workspace %s is not a directory", dir)
	}
	return nil
}

// confine returns the host directory for a command's cwd, refusing one
// that escapes the workspace lexically or through symlinks.
func confine(workspace, cwd string) (string, error) {
	rel, err := bothy.CleanCwd(cwd)
	if err != nil {
		return "", err
	}
	root, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return "", bothy.Errorf(bothy.ENOTFOUND, "workspace is gone")
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(root, rel))
	if err != nil {
		return "", bothy.Errorf(bothy.EINVALIDPATH, "working directory %q does not exist", cwd)
	}
	if dir != root && !strings.HasPrefix(dir, root+string(filepath.Separator)) {
		return "", bothy.Errorf(bothy.EINVALIDPATH, "working directory %q escapes the workspace", cwd)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", bothy.Errorf(bothy.EINVALIDPATH, "working directory %q is not a directory", cwd)
	}
	return dir, nil
}

// environ builds a command's environment: a minimal base, not the agent's
// own (which may hold its credential), then the lease's and the command's.
func environ(workspace string, layers ...map[string]string) []string {
	base := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin",
		"HOME": workspace,
		"LANG": "C.UTF-8",
	}
	if path := os.Getenv("PATH"); path != "" {
		base["PATH"] = path
	}
	return sandbox.Environ(base, layers...)
}

// waitGroupGone polls until no process of group pgid is left, for at most
// d, and reports whether it is gone.
func waitGroupGone(pgid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if err := syscall.Kill(-pgid, 0); err == syscall.ESRCH {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var _ bothy.SecretFiler = (*Provider)(nil)

// GivesSecretFiles reports true: the command inherits the memory files.
func (p *Provider) GivesSecretFiles() bool { return true }
