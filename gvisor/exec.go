package gvisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/cgroupfs"
	"github.com/bothyhq/bothy/sandbox"
)

// tagBase is the first gid used as a command's tag. Tags are random below
// tagBase+2^24, far above any uid or gid a Debian host gives to a user, a
// group or a lease.
const tagBase = 1 << 30

// processFD is the descriptor of runsc exec that carries the process.json.
const processFD = 3

// killer runs as root in the sandbox with only CAP_KILL: it sends signal
// $ARGV[1] to every live process of the sandbox whose groups hold the tag
// $ARGV[0]. For SIGKILL it first stops them with SIGSTOP, round after
// round until none of them runs (a stopped process forks no more, so a
// fork bomb cannot outpace it), then kills them and goes on until none is
// left, for 10 s at most; it exits 1 if some remain.
const killer = `my ($tag, $sig) = @ARGV; my $until = time + 10;
sub tagged {
	my @p;
	for my $s (glob "/proc/[0-9]*/status") {
		my ($pid) = $s =~ m{^/proc/(\d+)/} or next;
		open(my $f, "<", $s) or next;
		my ($state, $groups) = ("", "");
		while (<$f>) { $state = $1 if /^State:\s+(\S)/; $groups = $1 if /^Groups:\s*(.*)/ }
		next if $state eq "Z" || $state eq "X" || !grep { $_ eq $tag } split " ", $groups;
		push @p, [$pid, $state];
	}
	return @p;
}
if ($sig != 9) { kill($sig, $_->[0]) for tagged(); exit 0 }
while (time <= $until) {
	my @running = grep { $_->[1] ne "T" && $_->[1] ne "t" } tagged();
	last if !@running;
	kill("STOP", $_->[0]) for @running;
}
while (time <= $until) {
	my @left = tagged();
	exit 0 if !@left;
	kill("KILL", $_->[0]) for @left;
	select(undef, undef, undef, 0.01);
}
exit 1;`

// lister prints the command line of every live process of the sandbox but
// itself, one a line, its arguments joined by spaces.
const lister = `for my $c (glob "/proc/[0-9]*/cmdline") {
	my ($pid) = $c =~ m{^/proc/(\d+)/} or next;
	next if $pid == $$;
	open(my $f, "<", $c) or next; local $/; my $l = <$f>;
	next if !defined $l || $l eq "";
	$l =~ s/\0+$//; $l =~ tr/\0\n/  /; print "$l\n";
}`

// Exec runs the command with runsc exec as the lease's uid, with a tag gid
// of its own. If the command ends on its own, what it left running stays
// until Stop; at a timeout or cancel every process with its tag is killed.
func (p *Provider) Exec(ctx context.Context, h *bothy.SandboxHandle, spec bothy.ExecSpec) (*bothy.ExecResult, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Limits != (bothy.Limits{}) {
		return nil, bothy.Errorf(bothy.EINVALID, "the gvisor provider limits a lease, not a single command")
	} else if len(spec.SecretFiles) > 0 {
		return nil, bothy.Errorf(bothy.EINVALID, "the gvisor provider cannot give a command secret files; give the secret as an environment variable")
	}
	cwd, _ := bothy.CleanCwd(spec.Cwd)
	st, err := decodeState(h)
	if err != nil {
		return nil, err
	}
	if !sandbox.Exists(st.Dir) || !sandbox.Exists(p.netns(st)) {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s is not running", h.LeaseID)
	}
	if err := checkCwd(h.Workspace, spec.Cwd, cwd); err != nil {
		return nil, err
	}
	tag := newTag()
	proc := ociProcess{
		User: ociUser{UID: st.UID, GID: st.UID, AdditionalGids: []int{tag}},
		Args: spec.Argv,
		Env:  sandbox.Environ(sandbox.Inside(), h.Env, spec.Env),
		// The sandbox resolves the working directory in its own mount
		// namespace: a symlink in the workspace cannot lead out of it.
		Cwd:             path.Join("/workspace", cwd),
		Capabilities:    noCaps(),
		NoNewPrivileges: true,
	}
	if spec.Script != "" {
		proc.Args = []string{"/bin/bash", "-c", spec.Script}
	}
	// The lease's pids limit is enforced in the sandbox, as RLIMIT_NPROC
	// of the lease's uid: a fork bomb that reached the host's pids limit
	// would crash the sentry, and with it every process of the lease.
	// runsc exec ignores a process.json's rlimits, so prlimit sets it.
	// Limits.ScratchBytes is RLIMIT_FSIZE, which gVisor enforces as Linux
	// does (SIGXFSZ, EFBIG); Limits.OpenFiles is RLIMIT_NOFILE.
	limits := []string{"/usr/bin/prlimit", "--nproc=" + strconv.FormatInt(guestPids(h.Limits), 10)}
	if n := h.Limits.ScratchBytes; n > 0 {
		limits = append(limits, fmt.Sprintf("--fsize=%d:%d", n, n))
	}
	if n := h.Limits.OpenFiles; n > 0 {
		limits = append(limits, fmt.Sprintf("--nofile=%d:%d", n, n))
	}
	proc.Args = append(append(limits, "--"), proc.Args...)
	pidFile := filepath.Join(st.Dir, "exec-"+strconv.Itoa(tag)+".pid")
	defer os.Remove(pidFile)
	cmd, closeProc, err := p.runscExec(st, proc, "--pid-file", pidFile)
	if err != nil {
		return nil, err
	}
	defer closeProc()

	memDir, pidsDir := p.cgroupDir("memory", st), p.cgroupDir("pids", st)
	oomBefore, pidsBefore := cgroupfs.OOMKills(memDir), cgroupfs.PidsRefused(pidsDir)
	m := p.meter(st)
	res, err := sandbox.Run(ctx, cmd, spec, sandbox.RunOptions{
		Grace: p.opt.KillGrace,
		// runsc exec forwards no signal: signal the command's tree in the
		// sandbox by its tag.
		Signal:        func(sig syscall.Signal) { p.signalTag(st, tag, sig) },
		Memory:        m.memory,
		FileSizeLimit: h.Limits.ScratchBytes > 0,
	})
	if res == nil {
		return nil, err
	}
	m.end(&res.Usage)
	res.OOMKilled = cgroupfs.OOMKills(memDir) > oomBefore
	res.PidsLimited = cgroupfs.PidsRefused(pidsDir) > pidsBefore
	sandbox.MarkKilled(res)
	if err == nil && !sandbox.Exists(pidFile) {
		// runsc never started the command: the sandbox is gone, or the
		// program or the working directory is missing (runsc said which
		// on the command's stderr). A shell reports the latter as 127.
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if p.sandboxStatus(sctx, st) != "running" {
			return nil, bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s is not running", h.LeaseID)
		}
		res.ExitCode = 127
	}
	return res, err
}

// sandboxMeter measures a command by its sandbox's cgroups: the sentry's
// processes are not the command's, so the counters are the whole
// sandbox's, over the command's run (docs/gvisor.md).
type sandboxMeter struct {
	memoryDir, acctDir string
	cpuBefore          int64
}

// meter starts measuring a command: it notes the sandbox's CPU time and
// resets its memory high-water mark (which concurrent commands of the
// lease share).
func (p *Provider) meter(st *state) *sandboxMeter {
	m := &sandboxMeter{memoryDir: p.cgroupDir("memory", st), acctDir: p.cgroupDir("cpuacct", st)}
	m.cpuBefore = cgroupfs.CPUNanos(m.acctDir)
	os.WriteFile(filepath.Join(m.memoryDir, "memory.max_usage_in_bytes"), []byte("0"), 0)
	return m
}

// memory returns the sandbox's memory now.
func (m *sandboxMeter) memory() int64 {
	return cgroupfs.Memory(m.memoryDir)
}

// end fills u's CPU time and peak memory.
func (m *sandboxMeter) end(u *bothy.Usage) {
	if cpu := cgroupfs.CPUNanos(m.acctDir); cpu > m.cpuBefore {
		u.CPUMicros = (cpu - m.cpuBefore) / 1000
	}
	u.PeakMemoryBytes = max(u.PeakMemoryBytes, cgroupfs.MemoryPeak(m.memoryDir))
}

// runscExec returns a runsc exec command of proc in the lease's sandbox,
// with the process.json on a pipe, and a function that closes the pipe's
// read end once the command has started or failed.
func (p *Provider) runscExec(st *state, proc ociProcess, flags ...string) (*exec.Cmd, func(), error) {
	b, err := json.Marshal(proc)
	if err != nil {
		return nil, nil, fmt.Errorf("encode process: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	go func() {
		w.Write(b)
		w.Close()
	}()
	args := append([]string{"exec", "--process", "/proc/self/fd/" + strconv.Itoa(processFD)}, flags...)
	cmd := p.runsc(context.Background(), st, append(args, st.ID)...)
	cmd.ExtraFiles = []*os.File{r} // processFD
	return cmd, func() { r.Close() }, nil
}

// helper runs a provider's perl script in the sandbox as root with the
// given capabilities and returns its standard output.
func (p *Provider) helper(ctx context.Context, st *state, caps []string, script string, args ...string) ([]byte, error) {
	c := noCaps()
	c.Bounding, c.Effective, c.Permitted = caps, caps, caps
	proc := ociProcess{
		User:            ociUser{UID: 0, GID: 0},
		Args:            append([]string{"/usr/bin/perl", "-e", script, "--"}, args...),
		Env:             []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		Cwd:             "/",
		Capabilities:    c,
		NoNewPrivileges: true,
	}
	cmd, closeProc, err := p.runscExec(st, proc)
	if err != nil {
		return nil, err
	}
	defer closeProc()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sandbox helper: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	defer stop()
	if err := cmd.Wait(); err != nil {
		return out.Bytes(), fmt.Errorf("sandbox helper: %w (%s)", err, strings.TrimSpace(errOut.String()))
	}
	return out.Bytes(), nil
}

// signalTag sends sig to every process of the sandbox that holds the tag.
func (p *Provider) signalTag(st *state, tag int, sig syscall.Signal) {
	p.helper(context.Background(), st, []string{"CAP_KILL"}, killer, strconv.Itoa(tag), strconv.Itoa(int(sig)))
}

// SandboxProcesses returns the command lines, arguments joined by spaces,
// of the live processes in the lease's sandbox: the holder and what
// commands left running. The host sees none of them as processes of
// their own (on the ptrace platform they are stubs of the sentry), so
// this is how to look for them. A stopped sandbox has none.
func (p *Provider) SandboxProcesses(ctx context.Context, h *bothy.SandboxHandle) ([]string, error) {
	st, err := decodeState(h)
	if err != nil {
		return nil, err
	}
	if s := p.sandboxStatus(ctx, st); s != "running" {
		return nil, nil
	}
	out, err := p.helper(ctx, st, []string{}, lister)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"), nil
}

func newTag() int {
	var b [4]byte
	rand.Read(b[:])
	return tagBase + int(binary.BigEndian.Uint32(b[:])&(1<<24-1))
}

var _ bothy.LeaseMeter = (*Provider)(nil)

// LeaseUsage returns the sandbox's CPU time since Start (its cpuacct
// cgroup: every process of the sandbox and the sentry's own work) and the
// peak memory since the last command started (each command resets it).
func (p *Provider) LeaseUsage(ctx context.Context, h *bothy.SandboxHandle) (bothy.Usage, error) {
	st, err := decodeState(h)
	if err != nil {
		return bothy.Usage{}, err
	}
	return bothy.Usage{
		CPUMicros:       cgroupfs.CPUNanos(p.cgroupDir("cpuacct", st)) / 1000,
		PeakMemoryBytes: cgroupfs.MemoryPeak(p.cgroupDir("memory", st)),
	}, nil
}

// checkCwd returns EINVALIDPATH if the working directory rel (cleaned,
// relative to the workspace) does not exist or is not a directory in the
// workspace, which runsc would report only as an exit status of its own,
// or not at all. It resolves rel on the host beneath the workspace only
// (RESOLVE_BENEATH: no "..", no absolute symlink, no magic link leads out
// of it) and opens nothing but an O_PATH descriptor; a path it cannot
// resolve so (EXDEV, ELOOP, ...) it leaves to the sandbox, which resolves
// the directory in its own mount namespace.
func checkCwd(workspace, cwd, rel string) error {
	if rel == "" || rel == "." {
		return nil
	}
	root, err := unix.Open(workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch err {
	case nil:
		unix.Close(fd)
	case unix.ENOENT:
		return bothy.Errorf(bothy.EINVALIDPATH, "working directory %q does not exist", cwd)
	case unix.ENOTDIR:
		return bothy.Errorf(bothy.EINVALIDPATH, "working directory %q is not a directory", cwd)
	}
	return nil
}
