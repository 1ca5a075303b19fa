package bwrap

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/cgroupfs"
	"github.com/bothyhq/bothy/sandbox"
)

// enterProgram is the perl program that starts every command. It runs as
// root on the host, single-threaded (which setns into a user namespace
// needs), and does in one process what would take sh, prlimit, setpriv and
// nsenter:
//
//   - it writes its own pid to each cgroup.procs file given before "--",
//     so that it and everything it starts is in the lease's cgroups (the
//     command's own, for its usage) before any code of the lease runs;
//   - it sets RLIMIT_FSIZE, soft and hard, to the lease's ScratchBytes
//     unless that is 0: no file the command writes grows past it, and
//     without CAP_SYS_RESOURCE the command cannot raise it, and
//     RLIMIT_NOFILE likewise to the lease's OpenFiles;
//   - it drops its supplementary groups and sets no_new_privs;
//   - it enters the holder's namespaces (fds nsFD...), the user namespace
//     last, as nsenter does: bwrap's other namespaces belong to another
//     user namespace than the one /proc/PID/ns/user names, and in that one
//     the process would lose its capabilities over them. Then it enters the
//     holder's root and becomes the lease's uid and gid there;
//   - it restricts itself with Landlock (landlock.go), unless the lease
//     has no Landlock ABI ("-"), opening the rules' paths in the sandbox;
//   - it closes every descriptor but standard input, output and error,
//     envFD and the secret files, which follow the holder's: no other
//     descriptor, whoever opened it, reaches the command;
//   - it installs the seccomp filter, which denies setns among others, so
//     it comes after the namespaces and before any code of the lease;
//   - it forks, because only its children are in the sandbox's pid
//     namespace: the child execs the rest of its arguments, the parent
//     waits and exits as the child did, as nsenter does.
//
// Its arguments: the uid, the numbers of the calls it makes
// (syscallNumbers.String), the filter in hex, the file size limit, the
// Landlock rules (landlockRules), the first secret file's descriptor and
// the descriptor after the last. Perl's syscall passes a scalar as an
// integer only if it is a number, hence the "+ 0"s, and a string only if
// it is writable, which a pack of constants is not. Exit status 125 means
// the command could not enter its cgroups or sandbox (a Stop raced).
const enterProgram = `my ($uid, $nr, $prog, $fsize, $nofile, $ll, $secrets, $end) = (shift() + 0, shift, pack("H*", shift), shift() + 0, shift() + 0, shift, shift() + 0, shift() + 0);
my ($setgroups, $prctl, $setns, $fchdir, $setresgid, $setresuid, $seccomp, $prlimit, $llcreate, $lladd, $llrestrict, $closerange) = map { $_ + 0 } split(/,/, $nr);
sub fail { print STDERR "bothy: $_[0]: $!\n"; exit 125 }
while (@ARGV) { my $f = shift; last if $f eq "--"; my $c; open($c, ">", $f) && print($c "$$\n") && close($c) or fail("cannot enter cgroup $f") }
!$fsize or syscall($prlimit, 0, 1, pack("QQ", $fsize, $fsize), 0) == 0 or fail("limit file size");
!$nofile or syscall($prlimit, 0, 7, pack("QQ", $nofile, $nofile), 0) == 0 or fail("limit open files");
syscall($setgroups, 0, 0) == 0 or fail("setgroups");
syscall($prctl, 38, 1, 0, 0, 0) == 0 or fail("no_new_privs");
for my $fd (5 .. 10, 4) { syscall($setns, $fd, 0) == 0 or fail("setns") }
syscall($fchdir, 11) == 0 && chroot(".") && chdir("/") or fail("enter the sandbox's root");
syscall($setresgid, $uid, $uid, $uid) == 0 && syscall($setresuid, $uid, $uid, $uid) == 0 or fail("setuid");
if ($ll ne "-") {
	my ($handled, @rules) = split(/,/, $ll);
	my $rs = syscall($llcreate, pack("Q", $handled), 8, 0);
	$rs >= 0 or fail("landlock_create_ruleset");
	for (@rules) {
		my ($rights, $path) = split(/:/, $_, 2);
		sysopen(my $fh, $path, 010000000 | 02000000) or next; # O_PATH | O_CLOEXEC
		syscall($lladd, $rs, 1, pack("Q l", $rights, fileno($fh)), 0) == 0 or fail("landlock_add_rule $path");
	}
	syscall($llrestrict, $rs, 0) == 0 or fail("landlock_restrict_self");
}
syscall($closerange, 4, $secrets - 1, 0) == 0 && syscall($closerange, $end, 4294967295, 0) == 0 or fail("close descriptors");
syscall($seccomp, 1, 0, pack("S x![P] P", length($prog) / 8, $prog)) == 0 or fail("seccomp");
defined(my $pid = fork) or fail("fork");
if (!$pid) { exec { $ARGV[0] } @ARGV; print STDERR "bothy: exec $ARGV[0]: $!\n"; exit 127 }
waitpid($pid, 0) == $pid or fail("wait");
my $sig = $? & 127;
kill($sig, $$) if $sig;
exit($sig ? 128 + $sig : $? >> 8);`

// syscallNumbers are the numbers of the calls that enterProgram makes, on
// this architecture.
type syscallNumbers struct {
	setgroups, prctl, setns, fchdir, setresgid, setresuid, seccomp, prlimit64 uint32
	landlockCreateRuleset, landlockAddRule, landlockRestrictSelf              uint32
	closeRange                                                                uint32
}

// String returns the numbers in enterProgram's order, separated by commas.
func (n syscallNumbers) String() string {
	return fmt.Sprintf("%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", n.setgroups, n.prctl, n.setns, n.fchdir, n.setresgid, n.setresuid, n.seccomp,
		n.prlimit64, n.landlockCreateRuleset, n.landlockAddRule, n.landlockRestrictSelf, n.closeRange)
}

// envFD is the descriptor that carries the command's environment as
// NUL-terminated NAME=value pairs, so that environment values never appear
// in a command line (which every user of the host can read) nor in the
// environment of the root enter program. nsFD is the first of the
// holder's namespace descriptors (in the order of namespaces), then its
// root; enterProgram knows them as 4 to 10 and 11, and closes them.
const (
	envFD = 3
	nsFD  = 4
)

// wrapper runs in the sandbox as the lease's uid: it sets the environment
// from envFD, changes to the working directory ($1), closes envFD and
// execs the command, which then has standard input, output and error and
// its secret files only. envFD is a socket: if the working directory
// cannot be entered, the wrapper writes why on it ("missing", "notdir" or
// "denied") and exits 126, and Exec returns an error rather than the exit
// status, which is the command's own when the wrapper writes nothing.
const wrapper = `while IFS= read -r -d '' kv; do export "$kv"; done <&3; unset OLDPWD; ` +
	`if ! cd -- "$1" 2>/dev/null; then if [ -d "$1" ]; then r=denied; elif [ -e "$1" ]; then r=notdir; else r=missing; fi; printf %s "$r" >&3; exit 126; fi; ` +
	`exec 3<&-; shift; exec "$@"`

// cwdError returns the error of Exec for what the wrapper wrote on envFD,
// or nil if it wrote nothing: the command ran.
func cwdError(cwd string, why []byte) error {
	switch string(why) {
	case "":
		return nil
	case "missing":
		return bothy.Errorf(bothy.EINVALIDPATH, "working directory %q does not exist", cwd)
	case "notdir":
		return bothy.Errorf(bothy.EINVALIDPATH, "working directory %q is not a directory", cwd)
	case "denied":
		return bothy.Errorf(bothy.EINVALIDPATH, "working directory %q cannot be entered by the lease's user", cwd)
	}
	return fmt.Errorf("working directory %q: the wrapper reported %q", cwd, why)
}

// Exec enters the lease's sandbox with enterProgram, in cgroups of its
// own, as the lease's uid, under Landlock and the seccomp filter. If the
// command ends on its own, what it left running stays, in its cgroups,
// until Stop; at a timeout or cancel its whole unified cgroup is killed.
// Its usage is its cgroups': cpuacct.usage and memory.max_usage_in_bytes
// when its main process has exited, and memory.usage_in_bytes sampled
// while it runs.
func (p *Provider) Exec(ctx context.Context, h *bothy.SandboxHandle, spec bothy.ExecSpec) (*bothy.ExecResult, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	cwd, _ := bothy.CleanCwd(spec.Cwd)
	st, err := decodeState(h)
	if err != nil {
		return nil, err
	}
	for _, dir := range st.Cgroups.all() {
		if !sandbox.Exists(dir) {
			return nil, bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s is not running", h.LeaseID)
		}
	}
	holder, err := openHolder(h, st)
	if err != nil {
		return nil, err
	}
	defer sandbox.CloseAll(holder)
	st.Cgroups.sweepLeaves()

	cg := st.Cgroups.command(commandPrefix+sandbox.RandomHex(8), spec.Limits)
	if err := cg.create(spec.Limits); err != nil {
		return nil, err
	}
	var res *bothy.ExecResult
	defer func() {
		if res == nil || res.TimedOut || err != nil {
			signalLeaf(cg.unified, syscall.SIGKILL, 0)
			waitEmpty(cg.unified, 5*time.Second)
			cg.remove(2 * time.Second)
		} else {
			cg.remove(0)
		}
	}()

	// Secret files follow the enter program's descriptors (3 to 11),
	// which it and the wrapper close.
	firstFile := nsFD + len(holder)
	files, fileEnv, err := sandbox.SecretFiles(spec.SecretFiles, firstFile)
	if err != nil {
		return nil, err
	}
	defer sandbox.CloseAll(files)
	envR, envConn, err := envSocket()
	if err != nil {
		return nil, err
	}
	defer envR.Close()
	defer envConn.Close()
	go func() {
		envConn.Write(envPairs(h.Env, spec.Env, fileEnv))
		envConn.CloseWrite()
	}()

	cmd := sandbox.Command(context.Background(), "/usr/bin/perl", p.argv(h, st, cg, cwd, spec, firstFile, firstFile+len(files))...)
	cmd.ExtraFiles = append(append([]*os.File{envR}, holder...), files...) // envFD, nsFD..., secret files

	pidsDir := st.Cgroups.V1["pids"]
	oomBefore, pidsBefore := st.Cgroups.oomKills(), cgroupfs.PidsRefused(pidsDir)
	fsize := h.Limits.FileSizeLimit(spec.Limits)
	var mainPid int
	res, err = sandbox.Run(ctx, cmd, spec, sandbox.RunOptions{
		Grace:         p.opt.KillGrace,
		Started:       func(pid int) { mainPid = pid },
		Signal:        func(sig syscall.Signal) { signalLeaf(cg.unified, sig, mainPid) },
		Memory:        cg.memory,
		FileSizeLimit: fsize > 0,
	})
	// Every other holder of envFD has exited by now (the wrapper closes
	// it before the command starts): what it wrote is buffered, and the
	// read ends at once; the deadline only bounds it against a hang.
	envR.Close()
	envConn.SetReadDeadline(time.Now().Add(5 * time.Second))
	why, _ := io.ReadAll(io.LimitReader(envConn, 64))
	if cerr := cwdError(spec.Cwd, why); cerr != nil && err == nil {
		res, err = nil, cerr
		return nil, err
	}
	if res != nil {
		res.Usage.CPUMicros = cg.cpuMicros()
		res.Usage.PeakMemoryBytes = max(res.Usage.PeakMemoryBytes, cg.peakMemory())
		res.OOMKilled = st.Cgroups.oomKilledSince(oomBefore)
		res.PidsLimited = cgroupfs.PidsRefused(pidsDir) > pidsBefore || cg.pidsLimited()
		sandbox.MarkKilled(res)
	}
	return res, err
}

// envSocket returns the two ends of a Unix socket pair: the command's
// (envFD) and Exec's, which writes the environment and reads what the
// wrapper reports.
func envSocket() (*os.File, *net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[1]), "env")
	defer ours.Close()
	conn, err := net.FileConn(ours)
	if err != nil {
		syscall.Close(fds[0])
		return nil, nil, fmt.Errorf("env socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "env"), conn.(*net.UnixConn), nil
}

// argv returns the arguments of perl: enterProgram and its arguments,
// then the wrapper and the command. The command keeps the descriptors
// from firstFile to endFile (excluded), its secret files.
func (p *Provider) argv(h *bothy.SandboxHandle, st *state, cg *commandCgroups, cwd string, spec bothy.ExecSpec, firstFile, endFile int) []string {
	args := []string{"-e", enterProgram, strconv.Itoa(st.UID), enterSyscalls.String(), hex.EncodeToString(p.filter),
		strconv.FormatInt(h.Limits.FileSizeLimit(spec.Limits), 10), strconv.FormatInt(h.Limits.OpenFileLimit(spec.Limits), 10),
		landlockRules(st.Landlock),
		strconv.Itoa(firstFile), strconv.Itoa(endFile)}
	args = append(args, st.Cgroups.procsFiles(cg)...)
	args = append(args, "--", "/bin/bash", "-c", wrapper, "bothy-exec", filepath.Join("/workspace", cwd))
	if spec.Script != "" {
		return append(args, "/bin/bash", "-c", spec.Script)
	}
	return append(args, spec.Argv...)
}

// envPairs returns the command's environment as NUL-terminated NAME=value
// pairs: the sandbox's base, then the lease's variables, then the
// command's.
func envPairs(layers ...map[string]string) []byte {
	var b []byte
	for _, kv := range sandbox.Environ(sandbox.Inside(), layers...) {
		b = append(b, kv+"\x00"...)
	}
	return b
}

var _ bothy.CommandLimiter = (*Provider)(nil)

// LimitsCommands reports true: each command has its own memory, pids and
// cpu cgroups when it asks for limits (commandCgroups.create).
func (p *Provider) LimitsCommands() bool { return true }

var _ bothy.LeaseMeter = (*Provider)(nil)

// LeaseUsage returns the CPU time and peak memory of every process the
// lease's sandbox ran, from its cpuacct and memory cgroups, which hold
// its commands' as children.
func (p *Provider) LeaseUsage(ctx context.Context, h *bothy.SandboxHandle) (bothy.Usage, error) {
	st, err := decodeState(h)
	if err != nil {
		return bothy.Usage{}, err
	}
	var u bothy.Usage
	if dir := st.Cgroups.V1["cpuacct"]; dir != "" {
		u.CPUMicros = cgroupfs.CPUNanos(dir) / 1000
	}
	if dir := st.Cgroups.V1["memory"]; dir != "" {
		u.PeakMemoryBytes = cgroupfs.MemoryPeak(dir)
	}
	return u, nil
}

var _ bothy.SecretFiler = (*Provider)(nil)

// GivesSecretFiles reports true: secret files are memory files the enter
// program passes on (sandbox.SecretFiles).
func (p *Provider) GivesSecretFiles() bool { return true }
