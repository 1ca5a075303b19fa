package bwrap

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sandbox"
)

// holderInit is the sandbox's pid 1 (bwrap --as-pid-1,
// sandbox.InitProgram). It tells Start that the sandbox is set up by
// writing to fd 4.
var holderInit = sandbox.InitProgram(4)

// holderTrampoline runs as root: it writes its pid to each cgroup.procs
// file given before "--", then starts the rest in the background and
// exits, so that the sandbox is nobody's child: it outlives the process
// that called Start. Exit status 125 means a cgroup could not be entered.
const holderTrampoline = `for f; do [ "$f" = -- ] && break; echo $$ > "$f" || { echo "bothy: cannot enter cgroup $f" >&2; exit 125; }; shift; done; shift; "$@" </dev/null & exit 0`

// holderLeaf is the name of the holder's cgroup in the unified hierarchy.
const holderLeaf = "holder"

// startHolder starts the lease's sandbox: one bwrap, detached, whose pid 1
// runs until Stop. Commands enter its namespaces. It records the host pid
// of that pid 1 and its start time in st. With spec.NetNS, bwrap starts in
// that network namespace (nsenter) and keeps it (--share-net); with
// Limits.ScratchBytes and OpenFiles, it runs under that RLIMIT_FSIZE and
// RLIMIT_NOFILE (prlimit), as commands do.
func (p *Provider) startHolder(ctx context.Context, spec bothy.LeaseSpec, st *state) error {
	leaf := filepath.Join(st.Cgroups.Unified, holderLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil {
		return fmt.Errorf("create holder cgroup: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(st.Dir, "holder.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open holder log: %w", err)
	}
	defer logf.Close()
	// The filter fits in a pipe's buffer: it is all there before bwrap
	// reads it.
	seccompR, seccompW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	defer seccompR.Close()
	_, err = seccompW.Write(p.filter)
	seccompW.Close()
	if err != nil {
		return fmt.Errorf("write seccomp filter: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	defer readyR.Close()
	infoR, infoW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return fmt.Errorf("pipe: %w", err)
	}
	defer infoR.Close()

	uid := strconv.Itoa(st.UID)
	passwd, group, err := writeIdentity(st)
	if err != nil {
		return err
	}
	args := []string{"-c", holderTrampoline, "sh"}
	args = append(args, st.Cgroups.procsFiles(&commandCgroups{unified: leaf})...)
	args = append(args, "--")
	var network []string
	if spec.NetNS != "" {
		args = append(args, p.opt.Nsenter, "--net="+spec.NetNS, "--")
		network = []string{"--share-net"}
	}
	if n := spec.Limits.ScratchBytes; n > 0 {
		args = append(args, p.opt.Prlimit, fmt.Sprintf("--fsize=%d:%d", n, n), "--")
	}
	if n := spec.Limits.OpenFiles; n > 0 {
		args = append(args, p.opt.Prlimit, fmt.Sprintf("--nofile=%d:%d", n, n), "--")
	}
	args = append(args,
		p.opt.Setpriv, "--reuid", uid, "--regid", uid, "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--",
		p.opt.Bwrap,
		"--unshare-all")
	args = append(args, network...)
	args = append(args, "--new-session", "--as-pid-1",
		"--info-fd", "5",
		"--seccomp", "6",
		"--ro-bind", "/usr", "/usr",
		"--symlink", "usr/bin", "/bin",
		"--symlink", "usr/sbin", "/sbin",
		"--symlink", "usr/lib", "/lib",
		"--symlink", "usr/lib64", "/lib64",
		"--ro-bind", "/etc", "/etc",
		"--ro-bind", passwd, "/etc/passwd",
		"--ro-bind", group, "/etc/group",
		"--proc", "/proc",
		"--dev", "/dev",
		"--tmpfs", "/tmp",
		"--bind", filepath.Join(st.Dir, "workspace"), "/workspace",
		"--chdir", "/workspace",
		"--hostname", "bothy",
		"--", "/usr/bin/perl", "-e", holderInit,
	)
	cmd := sandbox.Command(context.Background(), "/bin/sh", args...)
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{nil, readyW, infoW, seccompR} // fds 3, 4, 5, 6
	err = cmd.Run()
	readyW.Close()
	infoW.Close()
	if err != nil {
		return fmt.Errorf("start sandbox: %w (%s)", err, holderLog(st))
	}

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		readyR.SetReadDeadline(time.Now())
		infoR.SetReadDeadline(time.Now())
	})
	defer stop()
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.NewDecoder(infoR).Decode(&info); err != nil || info.ChildPid <= 0 {
		return fmt.Errorf("start sandbox: no pid from bwrap (%s)", holderLog(st))
	}
	st.Holder = info.ChildPid
	if line, _ := bufio.NewReader(readyR).ReadString('\n'); line != "ready\n" {
		return fmt.Errorf("start sandbox: not ready (%s)", holderLog(st))
	}
	if st.HolderStart = startTime(st.Holder); st.HolderStart == 0 {
		return fmt.Errorf("start sandbox: its init %d is gone (%s)", st.Holder, holderLog(st))
	}
	return nil
}

// holderLog returns the end of the holder's stderr, for an error message.
func holderLog(st *state) string {
	f, err := os.Open(filepath.Join(st.Dir, "holder.log"))
	if err != nil {
		return "no log"
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	if s := strings.TrimSpace(string(b)); s != "" {
		return s
	}
	return "no output"
}

// startTime returns the start time of a process, in clock ticks since
// boot, or 0 if there is no such process. A pid and its start time name
// one process: a reused pid has a later start time.
func startTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64) // field 22 of stat
	return n
}

// namespaces are the holder's namespaces that a command enters, by their
// names in /proc/PID/ns. enterProgram knows their order: the user
// namespace first.
var namespaces = []string{"user", "mnt", "net", "pid", "ipc", "uts", "cgroup"}

// openHolder opens the holder's namespaces and root directory, in the
// order of namespaces then the root, and checks afterwards that the pid
// still names the holder, so that a reused pid cannot put a command into
// another process's namespaces. A holder that is gone is ENOTFOUND.
func openHolder(h *bothy.SandboxHandle, st *state) ([]*os.File, error) {
	gone := bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s has ended (its init %d is gone)", h.LeaseID, st.Holder)
	if startTime(st.Holder) != st.HolderStart {
		return nil, gone
	}
	dir := "/proc/" + strconv.Itoa(st.Holder)
	var files []*os.File
	closeAll := func() { sandbox.CloseAll(files) }
	for _, ns := range namespaces {
		f, err := os.Open(filepath.Join(dir, "ns", ns))
		if err != nil {
			closeAll()
			return nil, gone
		}
		files = append(files, f)
	}
	root, err := os.Open(filepath.Join(dir, "root"))
	if err != nil {
		closeAll()
		return nil, gone
	}
	files = append(files, root)
	if startTime(st.Holder) != st.HolderStart {
		closeAll()
		return nil, gone
	}
	return files, nil
}

// identityFiles are the lease's copies of /etc/passwd and /etc/group in
// its directory.
var identityFiles = []string{"passwd", "group"}

// writeIdentity writes the host's /etc/passwd and /etc/group plus an entry
// "bothy" for the lease's uid into the lease's directory, for the sandbox
// to see: without a name for their uid, tools like ls -l, stat, id and git
// look it up in the whole file on every call, and some refuse to run.
func writeIdentity(st *state) (passwd, group string, err error) {
	uid := strconv.Itoa(st.UID)
	add := map[string]string{
		"passwd": "bothy:x:" + uid + ":" + uid + ":bothy:/workspace:/bin/bash\n",
		"group":  "bothy:x:" + uid + ":\n",
	}
	var paths []string
	for _, name := range identityFiles {
		b, err := os.ReadFile(filepath.Join("/etc", name))
		if err != nil {
			return "", "", err
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		p := filepath.Join(st.Dir, name)
		if err := os.WriteFile(p, append(b, add[name]...), 0o644); err != nil {
			return "", "", err
		}
		paths = append(paths, p)
	}
	return paths[0], paths[1], nil
}
