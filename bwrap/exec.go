package bwrap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/process"
)

// trampoline runs as root: it writes its own pid to each cgroup.procs file
// given before "--", so that it and everything it becomes is in the
// lease's cgroups before any code of the lease runs, then execs the rest.
// Exit status 125 means a cgroup could not be entered (a Stop raced).
const trampoline = `for f; do [ "$f" = -- ] && break; echo $$ > "$f" || { echo "bothy: cannot enter cgroup $f" >&2; exit 125; }; shift; done; shift; exec "$@"`

// argsFD is the descriptor that carries bwrap's --setenv options, so that
// environment values never appear in a command line (which every user of
// the host can read) nor in the environment of the root trampoline.
const argsFD = 3

// Exec runs the command in a new bwrap in the lease's cgroups as the
// lease's uid.
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
		if !exists(dir) {
			return nil, bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s is not running", h.LeaseID)
		}
	}

	leaf := filepath.Join(st.Cgroups.Unified, "x"+randomHex(8))
	if err := os.Mkdir(leaf, 0o755); err != nil {
		return nil, fmt.Errorf("create command cgroup: %w", err)
	}
	defer func() {
		signalLeaf(leaf, syscall.SIGKILL)
		waitEmpty(leaf, 5*time.Second)
		removeCgroup(leaf, 2*time.Second)
	}()

	argsR, argsW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	defer argsR.Close()
	go func() {
		argsW.Write(envArgs(h.Env, spec.Env))
		argsW.Close()
	}()

	cmd := exec.Command("/bin/sh", p.argv(st, leaf, cwd, spec)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.ExtraFiles = []*os.File{argsR} // argsFD
	// Nothing runs in the agent's session: a command cannot reach its
	// terminal, and the agent's job control never signals a command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}

	oomPath := filepath.Join(st.Cgroups.V1["memory"], "memory.oom_control")
	pidsPath := filepath.Join(st.Cgroups.V1["pids"], "pids.events")
	oomBefore, pidsBefore := readCounter(oomPath, "oom_kill"), readCounter(pidsPath, "max")
	res, err := process.Run(ctx, cmd, spec, process.RunOptions{
		Grace:  p.opt.KillGrace,
		Signal: func(sig syscall.Signal) { signalLeaf(leaf, sig) },
	})
	if res != nil {
		res.OOMKilled = readCounter(oomPath, "oom_kill") > oomBefore
		res.PidsLimited = readCounter(pidsPath, "max") > pidsBefore
		if res.Signal == "" && res.ExitCode == 128+int(syscall.SIGKILL) && (res.OOMKilled || res.TimedOut) {
			res.Signal = "SIGKILL"
		}
	}
	return res, err
}

// argv returns the arguments of /bin/sh: the trampoline, then setpriv,
// then bwrap, then the command.
func (p *Provider) argv(st *state, leaf, cwd string, spec bothy.ExecSpec) []string {
	uid := strconv.Itoa(st.UID)
	args := []string{"-c", trampoline, "sh"}
	args = append(args, st.Cgroups.procsFiles(leaf)...)
	args = append(args, "--",
		p.opt.Setpriv, "--reuid", uid, "--regid", uid, "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--",
		p.opt.Bwrap,
		"--args", strconv.Itoa(argsFD),
		"--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr",
		"--symlink", "usr/bin", "/bin",
		"--symlink", "usr/sbin", "/sbin",
		"--symlink", "usr/lib", "/lib",
		"--symlink", "usr/lib64", "/lib64",
		"--ro-bind", "/etc", "/etc",
		"--proc", "/proc",
		"--dev", "/dev",
		"--tmpfs", "/tmp",
		"--bind", filepath.Join(st.Dir, "workspace"), "/workspace",
		"--chdir", filepath.Join("/workspace", cwd),
		"--hostname", "bothy",
		"--",
	)
	if spec.Script != "" {
		return append(args, "/bin/bash", "-c", spec.Script)
	}
	return append(args, spec.Argv...)
}

// envArgs returns bwrap's NUL-separated options that set the command's
// environment: a clean base, then the lease's variables, then the
// command's.
func envArgs(layers ...map[string]string) []byte {
	env := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
		"HOME": "/workspace",
		"LANG": "C.UTF-8",
		"USER": "bothy",
	}
	for _, l := range layers {
		for k, v := range l {
			env[k] = v
		}
	}
	var b []byte
	b = append(b, "--clearenv\x00"...)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		b = append(b, "--setenv\x00"+k+"\x00"+env[k]+"\x00"...)
	}
	return b
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
