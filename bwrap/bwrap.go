// Package bwrap implements bothy.Provider with bubblewrap: the standard
// profile. It follows what was measured on the project's machines
// (../shared/LAB.md, "Isolation"):
//
//   - each lease has a cgroup v1 directory under the memory, pids, cpu and
//     cpuacct controllers (one directory where cpu and cpuacct are mounted
//     together) with its limits (memory.limit_in_bytes, pids.max,
//     cpu.cfs_quota_us), and a directory in the v2 unified hierarchy;
//   - each command has cgroups of its own under the lease's: a child in the
//     unified hierarchy, used only for cgroup.kill and an exact list of
//     its processes, and a child under memory and cpuacct for its usage
//     (cgroup.go). The lease's limits bound the children hierarchically.
//     A command's Usage is its cpuacct.usage and memory.max_usage_in_bytes
//     when its main process has exited, and its memory.usage_in_bytes
//     sampled every 200 ms while it runs; BytesWritten and NetworkBytes
//     are the caller's to fill;
//   - each lease has its own unprivileged host uid, allocated from a range
//     (200000 upwards by default), and the workspace is chowned to it
//     unless its root already appears owned by it: a runtime that asks
//     WorkspaceUID first can mount the workspace's overlay over an
//     idmapped lower layer (hostcache.MountOptions.IDMapUID), and a chown
//     through the overlay would copy every file up;
//   - one lease is one sandbox: Start runs one bwrap, detached from the
//     caller, through a root /bin/sh trampoline that writes its pid to the
//     lease's cgroups and then setpriv, which drops to the lease's uid with
//     no groups and no capabilities (inheritable, bounding). bwrap itself
//     never runs as root: started by root it would keep every capability.
//     bwrap unshares every namespace (user, mount, pid, net, ipc, uts,
//     cgroup), so the sandbox has only a loopback interface (no egress), a
//     read-only /usr and /etc, its own /proc, /dev and /tmp, and the
//     workspace read-write at /workspace. With LeaseSpec.NetNS, nsenter
//     starts bwrap in that network namespace instead and bwrap keeps it
//     (--share-net): the sandbox has the caller's veth, and the namespace
//     stays the caller's to remove. Its pid 1 is a small perl init
//     (holderInit) that reaps orphans and lives until Stop; the handle
//     records its host pid and start time. bwrap puts it under the
//     seccomp filter (seccomp.go);
//   - a command starts as a root perl program (enterProgram), which enters
//     its own cgroups, sets RLIMIT_FSIZE to Limits.ScratchBytes and
//     RLIMIT_NOFILE to Limits.OpenFiles (the holder has them too, through
//     prlimit), drops its groups, sets
//     no_new_privs, enters the sandbox's namespaces and root, becomes the
//     lease's uid there, restricts itself with Landlock (landlock.go:
//     writes only under /workspace, /tmp and /dev/shm) and installs the
//     same seccomp filter before it forks the command: a command is no
//     child of the sandbox's pid 1, so it would not inherit its filter.
//     Before the filter it closes every descriptor but standard input,
//     output and error, the environment's socket and the command's secret
//     files.
//     After exec it has no capabilities; its bounding set is full but
//     bound to the sandbox's user namespace, and no_new_privs keeps file
//     capabilities and set-uid programs from filling the others. A bash
//     wrapper reads the environment from a socket and changes to the
//     working directory before it execs the command; one it cannot enter
//     it reports on that socket, and Exec returns EINVALIDPATH. A command killed by
//     SIGXFSZ (or a script that exits 128+SIGXFSZ) is DiskLimited.
//
// So processes that a command leaves in the background, its /tmp and its
// listening sockets on 127.0.0.1 are there for the next command of the
// lease, until Stop.
//
// The workspace is bind-mounted under the provider's state directory first,
// because bwrap opens its source as the lease's uid, which may not be able
// to traverse the caller's directories.
package bwrap

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/cgroupfs"
	"github.com/bothyhq/bothy/sandbox"
)

// Name is the provider's name.
const Name = "bwrap"

// Defaults of Options; the others are sandbox.Host's.
const (
	DefaultStateDir     = "/run/bothy/bwrap"
	DefaultCgroupParent = "bothy"
	DefaultUIDBase      = 200000
)

var (
	_ bothy.Provider       = (*Provider)(nil)
	_ bothy.WorkspaceOwner = (*Provider)(nil)
)

// Options configure a Provider. Zero fields take the defaults.
type Options struct {
	// Host's StateDir holds a directory per lease (the workspace bind
	// mount) and the uid allocations; every directory above it must be
	// searchable by others (mode o+x), since bwrap runs as the lease's
	// uid. CgroupRoot holds the v1 controllers and the v2 "unified"
	// hierarchy.
	sandbox.Host
	// Bwrap, Setpriv, Nsenter and Prlimit are the programs' paths; empty
	// means a PATH lookup.
	Bwrap, Setpriv, Nsenter, Prlimit string
}

// Provider runs each lease in bubblewrap under its own uid and cgroups. It
// keeps no state in memory: everything it needs is in the handle and on
// the host, so any Provider with the same Options can take over a lease.
type Provider struct {
	opt Options
	// filter is the seccomp filter of every sandboxed process (seccomp.go).
	filter []byte
	leases *sandbox.Leases
	// acct is the hierarchy that holds the cpuacct controller: "cpuacct",
	// or "cpu" where the two are mounted together.
	acct string
	// owned holds the ids of the leases this Provider started or
	// recovered and has not stopped: a second Start of one of them is
	// ECONFLICT, while the directory of any other is what a start in a
	// process that died left behind.
	owned sync.Map
}

// state is the provider's part of a handle.
type state struct {
	UID     int         `json:"uid"`
	Dir     string      `json:"dir"` // the lease's directory under StateDir
	Cgroups cgroupPaths `json:"cgroups"`
	// Holder is the host pid of the sandbox's pid 1 and HolderStart its
	// start time (in clock ticks since boot, /proc/PID/stat field 22).
	Holder      int    `json:"holder"`
	HolderStart uint64 `json:"holder_start"`
	// Landlock is the Landlock ABI that restricts the lease's commands, as
	// Start found it, or 0 if the host has none of minLandlockABI or later
	// (landlock.go): its commands then run without. Handles written before
	// commands were restricted have none either.
	Landlock int `json:"landlock"`
}

// New checks the host's prerequisites and returns a Provider. It fails
// with an error naming everything missing: root, bwrap, setpriv, nsenter,
// prlimit, bash, perl (the sandbox's init and what enters it), an
// architecture the seccomp filter knows, the cgroup v1 memory, pids, cpu
// and cpuacct controllers with memory.use_hierarchy, cgroup.kill in the
// v2 hierarchy, or a state directory bwrap can traverse. Landlock is not
// required: without it, commands run without (see state.Landlock).
func New(opt Options) (*Provider, error) {
	opt.Host = opt.Host.WithDefaults(sandbox.Host{StateDir: DefaultStateDir, CgroupParent: DefaultCgroupParent, UIDBase: DefaultUIDBase})
	var need sandbox.Needs
	need.Root("it creates cgroups and drops to per-lease uids")
	need.Program(&opt.Bwrap, "bwrap")
	need.Program(&opt.Setpriv, "setpriv")
	need.Program(&opt.Nsenter, "nsenter")
	need.Program(&opt.Prlimit, "prlimit")
	need.Files("/bin/sh", "/bin/bash", "/usr/bin/perl")
	filter, err := seccompFilter()
	if err != nil {
		need.Add(err.Error())
	}
	acct := "cpuacct"
	if sandbox.Exists(filepath.Join(opt.CgroupRoot, "cpu", "cpuacct.usage")) {
		acct = "cpu"
	}
	if need.Met() {
		need.Add(opt.prepare(acct)...)
	}
	if err := need.Err("bwrap"); err != nil {
		return nil, err
	}
	// A reservation is live once its lease has started (it has a
	// directory) or while a process runs as its uid.
	leases := sandbox.NewLeases(opt.Host, func(uid int) bool { return len(processesOf(uid)) > 0 })
	return &Provider{opt: opt, filter: filter, leases: leases, acct: acct}, nil
}

// hierarchy returns the directory of the v1 hierarchy that holds
// controller ctl.
func (o *Options) hierarchy(ctl, acct string) string {
	if ctl == "cpuacct" {
		ctl = acct
	}
	return filepath.Join(o.CgroupRoot, ctl)
}

// prepare creates the parent cgroups and state directories and returns
// what it found missing.
func (o *Options) prepare(acct string) []string {
	var missing []string
	for _, ctl := range controllers {
		root := o.hierarchy(ctl, acct)
		dir := filepath.Join(root, o.CgroupParent)
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			missing = append(missing, fmt.Sprintf("the cgroup v1 %s controller at %s", ctl, root))
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			missing = append(missing, fmt.Sprintf("a writable cgroup %s (%v)", dir, err))
		}
	}
	// A command's memory cgroup is a child of its lease's: only with
	// use_hierarchy does the lease's limit count the command's memory.
	// Recent kernels have it always; on older ones it can be set while
	// the parent has no children yet.
	hier := filepath.Join(o.CgroupRoot, "memory", o.CgroupParent, "memory.use_hierarchy")
	if b, err := os.ReadFile(hier); err == nil && strings.TrimSpace(string(b)) == "0" {
		if err := os.WriteFile(hier, []byte("1"), 0); err != nil {
			missing = append(missing, fmt.Sprintf("memory.use_hierarchy 1 in %s (%v)", filepath.Dir(hier), err))
		}
	}
	unified := filepath.Join(o.CgroupRoot, "unified", o.CgroupParent)
	if err := os.MkdirAll(unified, 0o755); err != nil {
		missing = append(missing, fmt.Sprintf("the cgroup v2 hierarchy at %s (%v)", filepath.Dir(unified), err))
	} else if _, err := os.Stat(filepath.Join(unified, "cgroup.kill")); err != nil {
		missing = append(missing, fmt.Sprintf("cgroup.kill in %s (kernel 5.14 or later)", unified))
	}
	for _, dir := range []string{filepath.Join(o.StateDir, "leases"), filepath.Join(o.StateDir, "uids")} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			missing = append(missing, fmt.Sprintf("a state directory %s (%v)", dir, err))
		}
	}
	os.Chmod(filepath.Join(o.StateDir, "uids"), 0o700)
	for dir := filepath.Join(o.StateDir, "leases"); ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
			missing = append(missing, fmt.Sprintf("a state directory whose parents others can search (%s is %v)", dir, fi.Mode().Perm()))
			break
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	return missing
}

// Name returns "bwrap".
func (p *Provider) Name() string { return Name }

// IsolatesCommands implements bothy.CommandIsolator: each command is its
// own Landlock domain, when the host has Landlock ABI 2 or later.
func (p *Provider) IsolatesCommands() bool { return landlockABI() >= minLandlockABI }

// WorkspaceUID reserves the lease's uid (the first free one of the range,
// or the one already reserved for it) and returns it; Start uses it.
func (p *Provider) WorkspaceUID(ctx context.Context, leaseID string) (int, error) {
	return p.leases.WorkspaceUID(leaseID)
}

// Start takes the lease's uid (the one WorkspaceUID reserved, if it was
// called), bind-mounts its workspace and chowns it unless its root is
// already the uid's, creates its cgroups with the limits and starts its
// sandbox.
func (p *Provider) Start(ctx context.Context, spec bothy.LeaseSpec) (*bothy.SandboxHandle, error) {
	if _, dup := p.owned.LoadOrStore(spec.LeaseID, true); dup {
		return nil, bothy.Errorf(bothy.ECONFLICT, "lease %s is already started", spec.LeaseID)
	}
	h, err := p.startOwned(ctx, spec)
	if err != nil {
		p.owned.Delete(spec.LeaseID)
	}
	return h, err
}

// startOwned is Start of a lease that owned now holds.
func (p *Provider) startOwned(ctx context.Context, spec bothy.LeaseSpec) (*bothy.SandboxHandle, error) {
	dir, err := p.leases.Create(spec, 0o711)
	if bothy.ErrorCode(err) == bothy.ECONFLICT {
		// A start in a process that died before its caller recorded the
		// handle (so it asks again) left the lease's directory: undo
		// what it did, from what follows from the lease's id, and start
		// afresh.
		stale := &state{Dir: filepath.Join(p.leases.Dir, spec.LeaseID), Cgroups: p.cgroups(spec.LeaseID)}
		if uid, uerr := p.leases.UIDs.Reserve(spec.LeaseID); uerr == nil {
			stale.UID = uid
		}
		if res := p.teardown(stale); !res.Empty() {
			return nil, fmt.Errorf("lease %s: a start cut short left what cannot be undone: %+v", spec.LeaseID, res)
		}
		dir, err = p.leases.Create(spec, 0o711)
	}
	if err != nil {
		return nil, err
	}
	st := &state{Dir: dir, Landlock: landlockABI()}
	st.Cgroups = p.cgroups(spec.LeaseID)
	h, err := p.start(ctx, spec, st)
	if err != nil {
		p.teardown(st)
		return nil, err
	}
	return h, nil
}

func (p *Provider) cgroups(leaseID string) cgroupPaths {
	c := cgroupPaths{V1: make(map[string]string)}
	for _, ctl := range controllers {
		c.V1[ctl] = filepath.Join(p.opt.hierarchy(ctl, p.acct), p.opt.CgroupParent, leaseID)
	}
	c.Unified = filepath.Join(p.opt.CgroupRoot, "unified", p.opt.CgroupParent, leaseID)
	return c
}

func (p *Provider) start(ctx context.Context, spec bothy.LeaseSpec, st *state) (*bothy.SandboxHandle, error) {
	var err error
	if st.UID, err = p.leases.Own(spec); err != nil {
		return nil, err
	}
	mnt := filepath.Join(st.Dir, "workspace")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return nil, fmt.Errorf("create mount point: %w", err)
	}
	if err := unix.Mount(spec.Workspace, mnt, "", unix.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("bind-mount workspace: %w", err)
	}
	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return nil, fmt.Errorf("remount workspace nosuid: %w", err)
	}
	for _, dir := range st.Cgroups.all() {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
	}
	l := spec.Limits
	if l.Pids == 0 {
		l.Pids = sandbox.DefaultPids
	}
	if err := writeFile(filepath.Join(st.Cgroups.V1["pids"], "pids.max"), strconv.FormatInt(l.Pids, 10)); err != nil {
		return nil, err
	}
	if l.MemoryBytes > 0 {
		mem := st.Cgroups.V1["memory"]
		if err := writeFile(filepath.Join(mem, "memory.limit_in_bytes"), strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return nil, err
		}
		// With swap accounting, swap must be capped too or the limit
		// only pushes memory out to swap.
		if sw := filepath.Join(mem, "memory.memsw.limit_in_bytes"); sandbox.Exists(sw) {
			if err := writeFile(sw, strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
				return nil, err
			}
		}
	}
	if l.CPUMillis > 0 {
		cpu := st.Cgroups.V1["cpu"]
		if err := writeFile(filepath.Join(cpu, "cpu.cfs_period_us"), "100000"); err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(cpu, "cpu.cfs_quota_us"), strconv.FormatInt(l.CPUMillis*100, 10)); err != nil {
			return nil, err
		}
	}
	if err := p.startHolder(ctx, spec, st); err != nil {
		return nil, err
	}
	h, err := bothy.NewSandboxHandle(Name, spec, st)
	if err != nil {
		return nil, fmt.Errorf("new handle: %w", err)
	}
	return h, nil
}

// Stop kills every process of the lease, removes its cgroups, unmounts and
// removes its directory, and frees its uid once no process runs as it.
func (p *Provider) Stop(ctx context.Context, h *bothy.SandboxHandle) (*bothy.Residue, error) {
	res, err := sandbox.Stop(h, decodeState, p.teardown)
	if err == nil && res.Empty() {
		p.owned.Delete(h.LeaseID)
	}
	return res, err
}

// teardown undoes whatever part of Start happened and reports what it
// could not undo. Each step runs even if an earlier one failed.
func (p *Provider) teardown(st *state) *bothy.Residue {
	res := &bothy.Residue{}
	c := st.Cgroups
	os.WriteFile(filepath.Join(c.Unified, "cgroup.kill"), []byte("1"), 0)
	for _, dir := range c.v1Dirs() {
		if err := cgroupfs.Kill(dir, 5*time.Second); err != nil {
			res.Other = append(res.Other, err.Error())
		}
	}
	if !waitEmpty(c.Unified, 5*time.Second) {
		res.Other = append(res.Other, "cgroup "+c.Unified+" still holds processes")
	}
	for _, dir := range c.all() {
		if err := cgroupfs.Remove(dir, 2*time.Second); err != nil || sandbox.Exists(dir) {
			res.Cgroups = append(res.Cgroups, dir)
		}
	}

	mnt := filepath.Join(st.Dir, "workspace")
	if err := unix.Unmount(mnt, 0); err != nil && err != unix.EINVAL && err != unix.ENOENT {
		unix.Unmount(mnt, unix.MNT_DETACH)
	}
	if sandbox.Mounted(mnt) {
		res.Mounts = append(res.Mounts, mnt)
	} else {
		// Remove only empty directories: if the unmount silently failed,
		// RemoveAll would delete the workspace through the mount.
		os.Remove(mnt)
		os.Remove(filepath.Join(st.Dir, "holder.log"))
		for _, name := range identityFiles {
			os.Remove(filepath.Join(st.Dir, name))
		}
		os.Remove(st.Dir)
		if sandbox.Exists(st.Dir) {
			res.Paths = append(res.Paths, st.Dir)
		}
	}

	if st.UID != 0 {
		// The sandbox's pid 1 takes a moment to exit: the kernel has it
		// wait until every process of its pid namespace is reaped.
		res.Processes = sandbox.KillAll(func() []int { return processesOf(st.UID) }, 5*time.Second)
		// A uid is reused only once nothing of this lease is left.
		if res.Empty() {
			p.leases.UIDs.Release(st.UID)
		}
	}
	return res
}

// Recover checks that the lease's cgroups, mount, uid and sandbox (the same
// pid 1, by pid and start time) are still in place and returns the handle.
func (p *Provider) Recover(ctx context.Context, handle []byte) (*bothy.SandboxHandle, error) {
	h, st, err := sandbox.Decode(handle, Name, decodeState)
	if err != nil {
		return nil, err
	}
	for _, dir := range st.Cgroups.all() {
		if !sandbox.Exists(dir) {
			return nil, bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s is gone (no cgroup %s)", h.LeaseID, dir)
		}
	}
	if !sandbox.Mounted(filepath.Join(st.Dir, "workspace")) {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s is gone (workspace not mounted)", h.LeaseID)
	}
	if err := p.leases.Held(h.LeaseID, st.UID); err != nil {
		return nil, err
	}
	if startTime(st.Holder) != st.HolderStart {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s is gone (its init %d has ended)", h.LeaseID, st.Holder)
	}
	p.owned.Store(h.LeaseID, true)
	return h, nil
}

func decodeState(h *bothy.SandboxHandle) (*state, error) {
	var st state
	invalid := bothy.Errorf(bothy.EINVALID, "sandbox handle of lease %s has no valid bwrap state", h.LeaseID)
	if err := json.Unmarshal(h.State, &st); err != nil || st.Dir == "" || st.Cgroups.Unified == "" || st.Holder <= 0 {
		return nil, invalid
	}
	for _, ctl := range limitControllers {
		if st.Cgroups.V1[ctl] == "" {
			return nil, invalid
		}
	}
	return &st, nil
}

// processesOf returns the pids of live host processes whose real uid is
// uid. Zombies are left out: they run nothing and hold nothing but a pid,
// and the one a sandbox leaves (its pid 1, orphaned when the bwrap monitor
// is killed first) is reaped by the host's init.
func processesOf(uid int) []int {
	want := strconv.Itoa(uid)
	return sandbox.Processes(func(pid int) bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			return false
		}
		var zombie, match bool
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) > 1 && f[0] == "State:" {
				zombie = f[1] == "Z" || f[1] == "X"
			} else if len(f) > 1 && f[0] == "Uid:" {
				match = f[1] == want
				break
			}
		}
		return match && !zombie
	})
}
