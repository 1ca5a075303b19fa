package gvisor

import (
	"os"
	"path/filepath"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/sandbox"
)

// holderInit is the container's pid 1 (sandbox.InitProgram). It runs as
// root inside the sandbox with no capabilities, so that a command (the
// lease's uid) can neither signal nor trace it.
var holderInit = sandbox.InitProgram(0)

// The cgroup v1 controllers whose presence New checks; runsc creates the
// lease's cgroup under every v1 hierarchy it finds.
var controllers = []string{"memory", "pids", "cpu", "cpuacct"}

// The OCI runtime spec, as much of it as the provider writes.
type (
	ociSpec struct {
		Version  string     `json:"ociVersion"`
		Process  ociProcess `json:"process"`
		Root     ociRoot    `json:"root"`
		Hostname string     `json:"hostname"`
		Mounts   []ociMount `json:"mounts"`
		Linux    ociLinux   `json:"linux"`
	}
	ociProcess struct {
		User            ociUser    `json:"user"`
		Args            []string   `json:"args"`
		Env             []string   `json:"env"`
		Cwd             string     `json:"cwd"`
		Capabilities    ociCaps    `json:"capabilities"`
		NoNewPrivileges bool       `json:"noNewPrivileges"`
		Rlimits         []ociLimit `json:"rlimits,omitempty"`
	}
	// ociLimit is an rlimit of a container's init; runsc exec ignores
	// those of an exec'd process.
	ociLimit struct {
		Type string `json:"type"`
		Hard uint64 `json:"hard"`
		Soft uint64 `json:"soft"`
	}
	ociUser struct {
		UID            int   `json:"uid"`
		GID            int   `json:"gid"`
		AdditionalGids []int `json:"additionalGids,omitempty"`
	}
	// ociCaps lists capabilities; empty lists mean none, which runsc
	// takes literally (a missing object would give root its defaults).
	ociCaps struct {
		Bounding    []string `json:"bounding"`
		Effective   []string `json:"effective"`
		Inheritable []string `json:"inheritable"`
		Permitted   []string `json:"permitted"`
		Ambient     []string `json:"ambient"`
	}
	ociRoot struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	}
	ociMount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	ociLinux struct {
		Namespaces  []ociNamespace `json:"namespaces"`
		Resources   ociResources   `json:"resources"`
		CgroupsPath string         `json:"cgroupsPath"`
	}
	ociNamespace struct {
		Type string `json:"type"`
	}
	ociResources struct {
		Memory *ociMemory `json:"memory,omitempty"`
		CPU    *ociCPU    `json:"cpu,omitempty"`
		Pids   ociPids    `json:"pids"`
	}
	ociMemory struct {
		Limit int64 `json:"limit"`
		Swap  int64 `json:"swap"`
	}
	ociCPU struct {
		Quota  int64  `json:"quota"`
		Period uint64 `json:"period"`
	}
	ociPids struct {
		Limit int64 `json:"limit"`
	}
)

func noCaps() ociCaps {
	return ociCaps{Bounding: []string{}, Effective: []string{}, Inheritable: []string{}, Permitted: []string{}, Ambient: []string{}}
}

// containerSpec returns the lease's OCI spec: the holder as pid 1, the
// read-only skeleton as root, and the lease's limits. There is no network
// namespace in it: runsc runs in the lease's (--network=host).
func (p *Provider) containerSpec(spec bothy.LeaseSpec, st *state) *ociSpec {
	ro := []string{"rbind", "ro", "nosuid", "nodev"}
	s := &ociSpec{
		Version: "1.0.2",
		Process: ociProcess{
			User:            ociUser{UID: 0, GID: 0},
			Args:            []string{"/usr/bin/perl", "-e", holderInit},
			Env:             []string{"PATH=/usr/bin:/bin"},
			Cwd:             "/",
			Capabilities:    noCaps(),
			NoNewPrivileges: true,
		},
		Root:     ociRoot{Path: filepath.Join(p.opt.StateDir, "rootfs"), Readonly: true},
		Hostname: "bothy",
		Mounts: []ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/usr", Type: "bind", Source: "/usr", Options: ro},
			{Destination: "/etc", Type: "bind", Source: "/etc", Options: ro},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
			{Destination: "/workspace", Type: "bind", Source: spec.Workspace, Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		},
		Linux: ociLinux{
			Namespaces:  []ociNamespace{{"pid"}, {"ipc"}, {"uts"}, {"mount"}},
			CgroupsPath: st.Cgroup,
		},
	}
	l := spec.Limits
	if n := uint64(l.ScratchBytes); n > 0 {
		s.Process.Rlimits = []ociLimit{{Type: "RLIMIT_FSIZE", Hard: n, Soft: n}}
	}
	if n := uint64(l.OpenFiles); n > 0 {
		s.Process.Rlimits = append(s.Process.Rlimits, ociLimit{Type: "RLIMIT_NOFILE", Hard: n, Soft: n})
	}
	// The host's pids limit leaves room above the guest's for the
	// sentry's and the gofer's threads.
	s.Linux.Resources.Pids.Limit = guestPids(l) + MinPids
	if l.MemoryBytes > 0 {
		// Swap is capped too, or the limit only pushes memory to swap.
		s.Linux.Resources.Memory = &ociMemory{Limit: l.MemoryBytes, Swap: l.MemoryBytes}
	}
	if l.CPUMillis > 0 {
		s.Linux.Resources.CPU = &ociCPU{Quota: l.CPUMillis * 100, Period: 100000}
	}
	return s
}

// guestPids is the limit on the lease's processes and threads inside the
// sandbox.
func guestPids(l bothy.Limits) int64 {
	if l.Pids == 0 {
		return sandbox.DefaultPids
	}
	return l.Pids
}

// makeRootfs creates the sandbox's root directory: mount points for what
// the spec mounts and the symlinks of a merged-/usr Debian. It is shared by
// every lease and read-only inside the sandboxes.
func makeRootfs(dir string) error {
	for _, d := range []string{"", "usr", "etc", "proc", "dev", "tmp", "workspace"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	for _, name := range []string{"bin", "sbin", "lib", "lib64", "lib32", "libx32"} {
		target := "usr/" + name
		if _, err := os.Stat(filepath.Join("/", target)); err != nil {
			continue
		}
		link := filepath.Join(dir, name)
		if got, err := os.Readlink(link); err == nil && got == target {
			continue
		}
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return err
		}
	}
	return nil
}

// cgroupDir is the lease's cgroup under one v1 controller.
func (p *Provider) cgroupDir(ctl string, st *state) string {
	return filepath.Join(p.opt.CgroupRoot, ctl, st.Cgroup)
}

// cgroupDirs returns the lease's cgroup directories that exist, under
// every hierarchy.
func (p *Provider) cgroupDirs(st *state) []string {
	dirs, _ := filepath.Glob(filepath.Join(p.opt.CgroupRoot, "*", st.Cgroup))
	return dirs
}
