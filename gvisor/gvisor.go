// Package gvisor implements bothy.Provider with gVisor's runsc: the strong
// profile. Commands run on gVisor's own kernel (the sentry), not the host's;
// the host kernel sees only the sentry, its file proxy (the gofer) and, on
// the ptrace platform, one stub process per guest address space. It follows
// what was measured on the project's machines (../shared/LAB.md,
// "Isolation", and docs/gvisor.md):
//
//   - runsc runs with --platform=ptrace (kvm hangs on these machines) and
//     --network=host inside a network namespace that the provider creates
//     per lease and that holds only a loopback interface: the sandbox has
//     no egress. runsc's own --network=sandbox refuses to start here (its
//     test for the root namespace is wrong on kernel 6.x), so every runsc
//     command runs under `nsenter --net=/run/netns/NAME`; the sandbox's
//     control socket is an abstract one, which lives in that namespace.
//     With LeaseSpec.NetNS, the sandbox runs in that namespace instead
//     (with its veth, and runsc's control socket), and Stop leaves it to
//     the caller;
//   - one lease is one sandbox: Start writes an OCI bundle under the
//     lease's state directory and runs `runsc run --detach` with a small
//     perl init (holderInit) as the container's pid 1, which reaps orphans
//     and lives until Stop. The root filesystem is a read-only skeleton
//     holding /usr and /etc bound read-only from the host, the merged-usr
//     symlinks, gVisor's own /proc and /dev, a /tmp in the sandbox's
//     memory and the workspace read-write at /workspace;
//   - runsc puts the sandbox in cgroups of its own (CgroupParent/ID under
//     every v1 controller) with the lease's memory, pids and CPU limits:
//     runsc's cgroup v1 support works on these machines. The limits bound
//     the sandbox as a whole, sentry and gofer included; reaching them
//     kills the sentry and so the whole sandbox. So the lease's pids
//     limit is enforced inside the sandbox (RLIMIT_NPROC, which gVisor
//     honours; runsc exec ignores a process.json's rlimits, so prlimit
//     sets it), and the host's is MinPids above it. A memory limit that
//     is reached kills the sentry: the command's result says OOMKilled
//     and the lease's sandbox is gone. The same cgroups meter commands:
//     the sentry runs every process of the sandbox, so a command's Usage
//     is the sandbox's, over the command's run (the growth of
//     cpuacct.usage, the memory high-water mark reset at its start, and
//     memory.usage_in_bytes sampled every 200 ms): it includes the
//     sentry's own work and memory and, when commands of one lease run
//     at once or leave work in the background, theirs;
//   - Limits.ScratchBytes is RLIMIT_FSIZE of every command (prlimit) and
//     of the container's init (the spec's rlimits), which gVisor enforces
//     as Linux does: a write past it fails with EFBIG or SIGXFSZ, and a
//     command killed by SIGXFSZ is DiskLimited;
//   - Limits.OpenFiles is RLIMIT_NOFILE of every command and of the
//     container's init, in the same two ways;
//   - each lease has its own host uid from a range, as with bwrap
//     (package uidpool; see bothy.WorkspaceOwner): commands run as that
//     uid and gid inside the sandbox with no capabilities and
//     no_new_privs, and files they write to the workspace are owned by it
//     on the host;
//   - a command is `runsc exec` with a process.json given through a pipe,
//     so its environment never appears in a command line. It carries a
//     supplementary gid of its own (a tag) that its descendants keep
//     through setsid and double forks and cannot drop without
//     CAP_SETGID: at a timeout or cancel, a root helper in the sandbox
//     signals every process that holds the tag. This stands in for the
//     per-command cgroup of bwrap, since the sentry's processes are not in
//     host cgroups of their own.
//
// So processes that a command leaves in the background, its /tmp and its
// listening sockets on 127.0.0.1 are there for the next command of the
// lease, until Stop.
package gvisor

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/cgroupfs"
	"github.com/bothyhq/bothy/sandbox"
)

// Name is the provider's name.
const Name = "gvisor"

// Defaults of Options; the others are sandbox.Host's.
const (
	DefaultStateDir     = "/run/bothy/gvisor"
	DefaultCgroupParent = "bothy-gvisor"
	DefaultNetnsDir     = "/run/netns"
	// The uid range follows bwrap's (200000-265535), so that both
	// providers can run on one host.
	DefaultUIDBase = 300000
	// MinPids is the room the host's pids limit leaves above the lease's:
	// the host counts the sentry's and the gofer's threads and the ptrace
	// stubs too. A host limit of 64 crashed a sandbox, and 1024 above a
	// guest limit of 64 still did under a fork bomb; 8192 held.
	MinPids = 8192
)

var (
	_ bothy.Provider       = (*Provider)(nil)
	_ bothy.WorkspaceOwner = (*Provider)(nil)
)

// Options configure a Provider. Zero fields take the defaults.
type Options struct {
	// Host's StateDir holds the root filesystem skeleton, a directory per
	// lease (its OCI bundle and runsc's state) and the uid allocations;
	// CgroupRoot holds the v1 controllers.
	sandbox.Host
	// NetnsDir is where `ip netns` keeps named network namespaces.
	NetnsDir string
	// Runsc, Nsenter and IP are the programs' paths; empty means a PATH
	// lookup.
	Runsc, Nsenter, IP string
}

// Provider runs each lease in a gVisor sandbox. Like bwrap's, it keeps no
// state in memory: any Provider with the same Options can take over a
// lease from its handle.
type Provider struct {
	opt    Options
	leases *sandbox.Leases
}

// state is the provider's part of a handle.
type state struct {
	UID int    `json:"uid"`
	Dir string `json:"dir"` // the lease's directory under StateDir
	// ID names the runsc container and the network namespace. It is short
	// and random, not the lease id: the sandbox's abstract control socket
	// has a name of at most 108 bytes.
	ID     string `json:"id"`
	Cgroup string `json:"cgroup"` // cgroupsPath, under every controller
	// NetNS is the caller's network namespace (LeaseSpec.NetNS) that the
	// sandbox runs in; "" means one of the provider's own, named ID under
	// NetnsDir, which Stop removes.
	NetNS string `json:"netns,omitempty"`
}

func (st *state) runscRoot() string { return filepath.Join(st.Dir, "runsc") }

// netns returns the path of the network namespace the sandbox runs in.
func (p *Provider) netns(st *state) string {
	if st.NetNS != "" {
		return st.NetNS
	}
	return filepath.Join(p.opt.NetnsDir, st.ID)
}
func (st *state) bundle() string { return filepath.Join(st.Dir, "bundle") }

// New checks the host's prerequisites and returns a Provider. It fails
// with an error naming everything missing: root, runsc, nsenter, ip, perl
// (the sandbox's init and helpers), prlimit, bash, the cgroup v1 memory, pids, cpu
// and cpuacct controllers, or a writable state directory.
func New(opt Options) (*Provider, error) {
	opt.Host = opt.Host.WithDefaults(sandbox.Host{StateDir: DefaultStateDir, CgroupParent: DefaultCgroupParent, UIDBase: DefaultUIDBase})
	opt.NetnsDir = cmp.Or(opt.NetnsDir, DefaultNetnsDir)
	var need sandbox.Needs
	need.Root("runsc needs it to create sandboxes and cgroups")
	need.Program(&opt.Runsc, "runsc")
	need.Program(&opt.Nsenter, "nsenter")
	need.Program(&opt.IP, "ip")
	need.Files("/usr/bin/perl", "/usr/bin/prlimit", "/bin/bash")
	if need.Met() {
		need.Add(opt.prepare()...)
	}
	if err := need.Err("gvisor"); err != nil {
		return nil, err
	}
	// No host process runs as a gVisor lease's uid, so the lease
	// directory is the only sign of a started lease.
	return &Provider{opt: opt, leases: sandbox.NewLeases(opt.Host, nil)}, nil
}

// prepare creates the state directories and the root filesystem skeleton
// and returns what it found missing.
func (o *Options) prepare() []string {
	var missing []string
	for _, ctl := range controllers {
		if _, err := os.Stat(filepath.Join(o.CgroupRoot, ctl, "cgroup.procs")); err != nil {
			missing = append(missing, fmt.Sprintf("the cgroup v1 %s controller at %s", ctl, filepath.Join(o.CgroupRoot, ctl)))
		}
	}
	for _, dir := range []string{filepath.Join(o.StateDir, "leases"), filepath.Join(o.StateDir, "uids"), o.NetnsDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			missing = append(missing, fmt.Sprintf("a state directory %s (%v)", dir, err))
		}
	}
	if err := makeRootfs(filepath.Join(o.StateDir, "rootfs")); err != nil {
		missing = append(missing, fmt.Sprintf("a root filesystem skeleton (%v)", err))
	}
	return missing
}

// Name returns "gvisor".
func (p *Provider) Name() string { return Name }

// WorkspaceUID reserves the lease's uid (the first free one of the range,
// or the one already reserved for it) and returns it; Start uses it.
func (p *Provider) WorkspaceUID(ctx context.Context, leaseID string) (int, error) {
	return p.leases.WorkspaceUID(leaseID)
}

// Start takes the lease's uid, chowns the workspace to it unless its root
// already is the uid's, creates the lease's network namespace unless
// spec.NetNS names the caller's, writes the bundle and runs the sandbox.
func (p *Provider) Start(ctx context.Context, spec bothy.LeaseSpec) (*bothy.SandboxHandle, error) {
	dir, err := p.leases.Create(spec, 0o700)
	if err != nil {
		return nil, err
	}
	st := &state{Dir: dir, ID: "bothy-" + sandbox.RandomHex(8), NetNS: spec.NetNS}
	st.Cgroup = "/" + p.opt.CgroupParent + "/" + st.ID
	h, err := p.start(ctx, spec, st)
	if err != nil {
		p.teardown(st)
		return nil, err
	}
	return h, nil
}

func (p *Provider) start(ctx context.Context, spec bothy.LeaseSpec, st *state) (*bothy.SandboxHandle, error) {
	var err error
	if st.UID, err = p.leases.Own(spec); err != nil {
		return nil, err
	}
	if st.NetNS == "" {
		if err := p.addNetns(ctx, st.ID); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(st.bundle(), 0o700); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	b, err := json.MarshalIndent(p.containerSpec(spec, st), "", " ")
	if err != nil {
		return nil, fmt.Errorf("encode bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(st.bundle(), "config.json"), b, 0o600); err != nil {
		return nil, fmt.Errorf("write bundle: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(st.Dir, "runsc.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open runsc log: %w", err)
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := p.runsc(ctx, st, "--platform=ptrace", "--network=host", "run", "--detach", "--bundle", st.bundle(), st.ID)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("start sandbox: %w (%s)", err, tail(filepath.Join(st.Dir, "runsc.log")))
	}
	h, err := bothy.NewSandboxHandle(Name, spec, st)
	if err != nil {
		return nil, fmt.Errorf("new handle: %w", err)
	}
	return h, nil
}

// runsc returns a runsc command for the lease's sandbox, run in the lease's
// network namespace (where the sandbox's control socket is) with a clean
// environment, in a session of its own.
func (p *Provider) runsc(ctx context.Context, st *state, args ...string) *exec.Cmd {
	argv := append([]string{"--net=" + p.netns(st), "--", p.opt.Runsc, "--root=" + st.runscRoot()}, args...)
	return sandbox.Command(ctx, p.opt.Nsenter, argv...)
}

// addNetns creates the lease's network namespace with only its loopback
// interface, up.
func (p *Provider) addNetns(ctx context.Context, name string) error {
	for _, args := range [][]string{{"netns", "add", name}, {"-n", name, "link", "set", "lo", "up"}} {
		if out, err := exec.CommandContext(ctx, p.opt.IP, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w (%s)", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// sandboxStatus returns runsc's status of the lease's container
// ("running", "stopped", ...), or "" if runsc does not know it.
func (p *Provider) sandboxStatus(ctx context.Context, st *state) string {
	if !sandbox.Exists(p.netns(st)) || !sandbox.Exists(st.runscRoot()) {
		return ""
	}
	out, err := p.runsc(ctx, st, "state", st.ID).Output()
	if err != nil {
		return ""
	}
	var s struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(out, &s) != nil {
		return ""
	}
	return s.Status
}

// Stop deletes the sandbox, kills whatever of it is left, removes its
// cgroups, its own network namespace (not the caller's) and its directory,
// and frees its uid once nothing of the lease is left.
func (p *Provider) Stop(ctx context.Context, h *bothy.SandboxHandle) (*bothy.Residue, error) {
	return sandbox.Stop(h, decodeState, p.teardown)
}

// teardown undoes whatever part of Start happened and reports what it
// could not undo. Each step runs even if an earlier one failed.
func (p *Provider) teardown(st *state) *bothy.Residue {
	res := &bothy.Residue{}
	// Every host process of the sandbox (sentry, gofer, stubs) is in its
	// cgroups: SIGKILL ends it at once, where `runsc delete --force` takes
	// over a second even of a dead sandbox. Its state goes with the lease
	// directory.
	for _, ctl := range controllers {
		if err := cgroupfs.Kill(p.cgroupDir(ctl, st), 5*time.Second); err != nil {
			res.Other = append(res.Other, err.Error())
		}
	}
	// Then the lease's runsc commands (a runsc exec of a running command)
	// and anything of runsc's outside the cgroups: all name the lease's
	// runsc root on their command lines.
	marker := "--root=" + st.runscRoot()
	res.Processes = sandbox.KillAll(func() []int { return processesWith(marker) }, 5*time.Second)
	for _, dir := range p.cgroupDirs(st) {
		if err := cgroupfs.Remove(dir, 2*time.Second); err != nil || sandbox.Exists(dir) {
			res.Cgroups = append(res.Cgroups, dir)
		}
	}

	// A network namespace of the caller's stays: the caller removes it.
	if ns := p.netns(st); st.NetNS == "" {
		if sandbox.Exists(ns) {
			if err := unix.Unmount(ns, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
				res.Other = append(res.Other, fmt.Sprintf("unmount %s: %v", ns, err))
			}
			if !sandbox.Mounted(ns) {
				os.Remove(ns)
			}
		}
		if sandbox.Mounted(ns) {
			res.Mounts = append(res.Mounts, ns)
		} else if sandbox.Exists(ns) {
			res.Paths = append(res.Paths, ns)
		}
	}

	// The lease's directory holds only files of the provider and runsc;
	// refuse to remove it if anything is mounted under it.
	if under := sandbox.MountsUnder(st.Dir); len(under) > 0 {
		res.Mounts = append(res.Mounts, under...)
	} else if err := os.RemoveAll(st.Dir); err != nil || sandbox.Exists(st.Dir) {
		res.Paths = append(res.Paths, st.Dir)
	}

	if st.UID != 0 && res.Empty() {
		p.leases.UIDs.Release(st.UID)
	}
	return res
}

// Recover checks that the lease's sandbox is still running, under the same
// uid, and returns the handle.
func (p *Provider) Recover(ctx context.Context, handle []byte) (*bothy.SandboxHandle, error) {
	h, st, err := sandbox.Decode(handle, Name, decodeState)
	if err != nil {
		return nil, err
	}
	if err := p.leases.Held(h.LeaseID, st.UID); err != nil {
		return nil, err
	}
	if s := p.sandboxStatus(ctx, st); s != "running" {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s is gone (runsc status %q)", h.LeaseID, s)
	}
	return h, nil
}

func decodeState(h *bothy.SandboxHandle) (*state, error) {
	var st state
	if err := json.Unmarshal(h.State, &st); err != nil || st.Dir == "" || st.Cgroup == "" || st.UID <= 0 ||
		!strings.HasPrefix(st.ID, "bothy-") || bothy.ValidateID("sandbox id", st.ID) != nil {
		return nil, bothy.Errorf(bothy.EINVALID, "sandbox handle of lease %s has no valid gvisor state", h.LeaseID)
	}
	return &st, nil
}

// tail returns the end of a log file, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "no log"
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return s
	}
	return "no output"
}

// processesWith returns the pids of live host processes whose command line
// holds s. Zombies are left out.
func processesWith(s string) []int {
	return sandbox.Processes(func(pid int) bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		return err == nil && strings.Contains(string(b), s)
	})
}
