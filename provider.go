package bothy

import (
	"context"
	"encoding/json"
	"io"
	"path"
	"strings"
	"time"
)

// Provider runs a computer's commands in a sandbox on the local host: one
// sandbox per lease, started over a workspace directory that the caller has
// already materialized on local disk. Providers are named after what they
// use (bwrap, process, later gvisor); the control plane picks one by policy
// and records the choice, it never falls back silently to another.
//
// Every implementation passes providertest.TestProvider.
type Provider interface {
	// Name returns the provider's name as recorded on leases and receipts
	// ("bwrap", "process"). It is also the Provider field of its handles.
	Name() string

	// Start prepares a sandbox for a lease over spec.Workspace and returns
	// its handle. It starts no command; the sandbox it sets up (namespaces,
	// /tmp, an init) outlives the process that called Start, until Stop.
	// The provider may take ownership of the workspace for the lease: a
	// WorkspaceOwner chowns every file to the lease's uid, unless the
	// workspace's root already appears owned by that uid (see
	// WorkspaceOwner). A spec that fails Validate is EINVALID. If Start
	// fails it leaves nothing behind.
	Start(ctx context.Context, spec LeaseSpec) (*SandboxHandle, error)

	// Exec runs one command in the sandbox and waits for it. The command's
	// own failure (a non-zero exit, a signal, the timeout, the memory or
	// pids limit) is a result, not an error; an error means the command
	// could not be run or waited for (an invalid spec is EINVALID, one
	// over MaxCommandArgs or MaxCommandBytes ETOOLARGE, a Cwd that
	// escapes the workspace is EINVALIDPATH, a stopped sandbox is
	// ENOTFOUND).
	//
	// The command ends when its main process exits. What it left running
	// then (a server started with `&`, a nohup or setsid child) goes on
	// in the sandbox, visible to later commands (a listener on 127.0.0.1
	// answers them), until Stop. When spec.Timeout passes (SIGTERM to the
	// command's whole tree, children and grandchildren, then SIGKILL after
	// the provider's grace period; TimedOut is set) or when ctx is done
	// (the tree is killed and Exec returns ctx's error), nothing the
	// command started survives. Exec returns once everything the main
	// process wrote has been copied to spec.Stdout and spec.Stderr; what a
	// background process writes to them later is discarded, never an
	// EPIPE. It never closes spec.Stdin. Several Execs may run at once in
	// one sandbox.
	Exec(ctx context.Context, h *SandboxHandle, spec ExecSpec) (*ExecResult, error)

	// Stop kills every process of the sandbox, background ones included,
	// releases what Start took (cgroups, mounts, uids, state directories)
	// and proves that nothing remains. It always returns a Residue, empty when teardown is proven
	// complete; a non-empty Residue comes with an error, and the lease
	// should then be quarantined. Stop is idempotent: stopping a stopped
	// sandbox returns an empty Residue and no error. The workspace
	// directory itself is the caller's and stays.
	Stop(ctx context.Context, h *SandboxHandle) (*Residue, error)

	// Recover reattaches to a sandbox from an encoded handle (from
	// SandboxHandle.Encode), as a restarted agent or a per-lease
	// supervisor does: the same sandbox, with the background processes
	// that earlier commands left. A malformed handle, an unknown version
	// or another provider's handle is EINVALID; a sandbox that no longer
	// exists is ENOTFOUND.
	Recover(ctx context.Context, handle []byte) (*SandboxHandle, error)
}

// WorkspaceOwner is a Provider that runs a lease's commands as a host uid
// of its own and can name that uid before Start. The caller can then
// present the workspace as already owned by it (hostcache mounts the
// overlay over an idmapped lower layer), which saves Start a chown of every
// file: through an overlay, that chown would copy the whole workspace up.
type WorkspaceOwner interface {
	// WorkspaceUID returns the host uid, which is also the gid, that
	// Start will run the lease as, reserving it for the lease. It is
	// idempotent per lease id: later calls and Start get the same uid, as
	// does a restarted caller. The reservation ends with Stop of the
	// lease's sandbox; a reservation whose lease is never started is
	// released by the provider after a while (bwrap: an hour). If the
	// workspace's root appears owned by this uid and gid when Start runs,
	// Start takes the caller to have arranged that every file does, and
	// changes no owner; otherwise it chowns the tree.
	WorkspaceUID(ctx context.Context, leaseID string) (int, error)
}

// CommandLimiter is a Provider that can limit one command's memory, pids,
// CPU and file size (ExecSpec.Limits) apart from the lease's other
// commands; a provider that is not one refuses a spec with limits
// (EINVALID).
type CommandLimiter interface {
	Provider
	// LimitsCommands reports whether this provider, as configured, can.
	LimitsCommands() bool
}

// SecretFiler is a Provider that gives commands their secret files
// (ExecSpec.SecretFiles); a provider that is not one refuses a spec with
// them (EINVALID).
type SecretFiler interface {
	Provider
	// GivesSecretFiles reports whether this provider, as configured, can.
	GivesSecretFiles() bool
}

// CommandIsolator is a Provider that can keep the processes of one command
// of a sandbox from those of another: a process one command leaves running
// cannot read a later command's environment or memory, nor a later one an
// earlier one's (bwrap: a Landlock domain per command). On a provider that
// is not one, or says it cannot, a lease is one trust domain and the
// control plane keeps secrets and callers from meeting in it
// (control.Config.Isolating).
type CommandIsolator interface {
	Provider
	// IsolatesCommands reports whether this provider, on this host, does.
	IsolatesCommands() bool
}

// LeaseMeter is a Provider that can tell what a lease's sandbox consumed
// since Start, all its processes together: the commands', those they left
// running, and the sandbox's own.
type LeaseMeter interface {
	Provider
	// LeaseUsage returns the CPU time (CPUMicros) and the peak memory
	// (PeakMemoryBytes) of the sandbox so far; it is called before Stop.
	LeaseUsage(ctx context.Context, h *SandboxHandle) (Usage, error)
}

// Limits are a lease's resource limits. Zero means the provider's default,
// which may be unlimited.
type Limits struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty"` // resident memory; exceeding it OOM-kills
	Pids        int64 `json:"pids,omitempty"`         // processes and threads at once
	CPUMillis   int64 `json:"cpu_millis,omitempty"`   // CPU time per wall time, in thousandths of a CPU
	// ScratchBytes bounds what commands write: a single file may not grow
	// past it (the write fails with EFBIG), and a command whose lease's
	// writable layer grows past it is killed and reported DiskLimited.
	ScratchBytes int64 `json:"scratch_bytes,omitempty"`
	// OpenFiles is every command's RLIMIT_NOFILE, soft and hard: no
	// process of it holds more descriptors open at once.
	OpenFiles int64 `json:"nofile,omitempty"`
}

// OpenFileLimit returns the descriptors a process of a command of a lease
// with these limits may hold, given the command's own limits: the lower
// non-zero limit, or 0 for none.
func (l Limits) OpenFileLimit(cmd Limits) int64 {
	if cmd.OpenFiles > 0 && (l.OpenFiles == 0 || cmd.OpenFiles < l.OpenFiles) {
		return cmd.OpenFiles
	}
	return l.OpenFiles
}

// LeaseSpec describes the sandbox of one lease.
type LeaseSpec struct {
	LeaseID    string
	ComputerID string
	Generation int64
	// Workspace is an absolute host directory, already materialized by the
	// caller, that commands see as their workspace.
	Workspace string
	Limits    Limits
	// NetNS, if set, is the path of a network namespace prepared by the
	// caller (egress.Network: a veth whose only reachable address is the
	// egress broker); the sandbox joins it instead of a namespace of its
	// own with only a loopback interface. The caller removes it after Stop.
	NetNS string
	// Env is set for every command of the lease, under ExecSpec.Env. It is
	// kept in the handle, so it must hold no secret.
	Env map[string]string
}

// FileSizeLimit returns the size a file written by a command of a lease
// with these limits may grow to, given the command's own limits: the lower
// non-zero scratch limit, or 0 for none.
func (l Limits) FileSizeLimit(cmd Limits) int64 {
	if cmd.ScratchBytes > 0 && (l.ScratchBytes == 0 || cmd.ScratchBytes < l.ScratchBytes) {
		return cmd.ScratchBytes
	}
	return l.ScratchBytes
}

// Validate reports whether s can be started.
func (s *LeaseSpec) Validate() error {
	if err := ValidateID("lease id", s.LeaseID); err != nil {
		return err
	} else if err := ValidateID("computer id", s.ComputerID); err != nil {
		return err
	} else if s.Generation < 1 {
		return Errorf(EINVALID, "lease generation must be at least 1")
	} else if s.Workspace == "" || !path.IsAbs(s.Workspace) {
		return Errorf(EINVALID, "lease workspace must be an absolute directory")
	} else if s.NetNS != "" && !path.IsAbs(s.NetNS) {
		return Errorf(EINVALID, "lease network namespace must be an absolute path")
	} else if s.Limits.MemoryBytes < 0 || s.Limits.Pids < 0 || s.Limits.CPUMillis < 0 || s.Limits.ScratchBytes < 0 || s.Limits.OpenFiles < 0 {
		return Errorf(EINVALID, "lease limits must not be negative")
	}
	return validateEnv(s.Env)
}

// ExecSpec is one command to run in a sandbox.
type ExecSpec struct {
	// Argv is the program and its arguments, looked up in the sandbox's
	// PATH. Exactly one of Argv and Script is set.
	Argv []string
	// Script is run by bash, as `bash -c SCRIPT`.
	Script string
	// Cwd is the working directory relative to the workspace root; "" is
	// the root. Absolute paths and ".." that would climb out are
	// EINVALIDPATH.
	Cwd string
	// Env is added to the lease's environment for this command.
	Env map[string]string
	// Stdin is the command's standard input; nil reads as empty.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output; nil discards it.
	// They are written from two goroutines, so one writer given as both
	// must be safe for concurrent use.
	Stdout, Stderr io.Writer
	// Timeout bounds the command's wall time; zero means none.
	Timeout time.Duration
	// SecretFiles are secrets given as files: each key is an environment
	// variable that is set to the path of a file holding the value
	// (/dev/fd/N, a sealed memory file), which only the command's
	// processes can open. It is never written to disk. A provider that is
	// no SecretFiler refuses a spec with them (EINVALID).
	SecretFiles map[string]string
	// Limits are the command's own limits, within the lease's: MemoryBytes,
	// Pids and CPUMillis bound the command's processes together (its
	// background ones too), ScratchBytes lowers the size a file may grow
	// to. Zero fields leave the lease's. A provider that is no
	// CommandLimiter refuses a spec with limits (EINVALID).
	Limits Limits
}

// Validate reports whether s can be run.
func (s *ExecSpec) Validate() error {
	return validateRun(s.Argv, s.Script, s.Cwd, s.Timeout, s.Limits, s.Env, s.SecretFiles)
}

// validateRun is the one check of what a command runs and with what, which
// ExecSpec, RunSpec and RunRequest each make through it: the program
// (validateProgram), the working directory (CleanCwd), a timeout and
// limits that are not negative, and the environment, where no variable
// may be set by two of envs.
func validateRun(argv []string, script, cwd string, timeout time.Duration, l Limits, envs ...map[string]string) error {
	if err := validateProgram(argv, script); err != nil {
		return err
	} else if timeout < 0 {
		return Errorf(EINVALID, "a command's timeout must not be negative")
	} else if l.MemoryBytes < 0 || l.Pids < 0 || l.CPUMillis < 0 || l.ScratchBytes < 0 || l.OpenFiles < 0 {
		return Errorf(EINVALID, "a command's limits must not be negative")
	} else if _, err := CleanCwd(cwd); err != nil {
		return err
	}
	for i, env := range envs {
		if err := validateEnv(env); err != nil {
			return err
		}
		for name := range env {
			for _, other := range envs[i+1:] {
				if _, ok := other[name]; ok {
					return Errorf(EINVALID, "environment variable %s is set twice (by env, a secret or a secret file)", name)
				}
			}
		}
	}
	return nil
}

// CleanCwd returns the canonical workspace-relative form of a command's
// working directory ("." for the root). An absolute path, a ".." that
// climbs above the root or a NUL byte is EINVALIDPATH. It is lexical only:
// a provider that runs commands outside a mount namespace must also check
// that symlinks do not lead out of the workspace.
func CleanCwd(cwd string) (string, error) {
	if strings.IndexByte(cwd, 0) >= 0 {
		return "", Errorf(EINVALIDPATH, "working directory holds a NUL byte")
	} else if strings.HasPrefix(cwd, "/") {
		return "", Errorf(EINVALIDPATH, "working directory %q must be relative to the workspace", cwd)
	} else if len(cwd) > 4096 {
		return "", Errorf(EINVALIDPATH, "working directory is over 4096 bytes")
	}
	depth := 0
	for elem := range strings.SplitSeq(cwd, "/") {
		switch elem {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return "", Errorf(EINVALIDPATH, "working directory %q escapes the workspace", cwd)
			}
		default:
			depth++
		}
	}
	return path.Clean("./" + cwd), nil
}

func validateEnv(env map[string]string) error {
	for k, v := range env {
		if err := validateEnvName(k); err != nil {
			return err
		} else if strings.IndexByte(v, 0) >= 0 {
			return Errorf(EINVALID, "environment variable %s holds a NUL byte", k)
		}
	}
	return nil
}

// ExecResult is how a command ended.
type ExecResult struct {
	// ExitCode is the exit status; a command killed by signal N reports
	// 128+N, as a shell does.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the command ("SIGKILL") when the
	// provider knows it, else "".
	Signal string `json:"signal,omitempty"`
	// TimedOut reports that the command was killed at its timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// OOMKilled reports that the memory limit killed a process of the
	// sandbox while the command ran.
	OOMKilled bool `json:"oom_killed,omitempty"`
	// PidsLimited reports that the pids limit refused a fork while the
	// command ran.
	PidsLimited bool `json:"pids_limited,omitempty"`
	// DiskLimited reports that the command hit the scratch limit: a write
	// past Limits.ScratchBytes failed (EFBIG, SIGXFSZ) or the lease's
	// writable layer grew past it and the command was killed.
	DiskLimited bool          `json:"disk_limited,omitempty"`
	Duration    time.Duration `json:"duration"`
	// Usage is what the command's processes consumed while it ran.
	Usage Usage `json:"usage"`
}

// Usage is what a command or a lease consumed: integers only, so that it
// can be stated in a receipt.
type Usage struct {
	// CPUMicros is user plus system CPU time, from cgroup accounting.
	CPUMicros int64 `json:"cpu_us"`
	// PeakMemoryBytes is the highest resident memory charged at once.
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	// MemoryByteSeconds is resident memory integrated over wall time
	// (sampled); divide by 2^30 for GiB-seconds.
	MemoryByteSeconds int64 `json:"memory_byte_seconds"`
	// BytesWritten is the size of the files the command created or
	// changed in the workspace, as the checkpoint after it found them.
	BytesWritten int64 `json:"bytes_written"`
	// NetworkBytes is what went through the egress broker for the lease
	// while the command ran, both directions.
	NetworkBytes int64 `json:"network_bytes"`
	// WallMillis is the wall time.
	WallMillis int64 `json:"wall_ms"`
}

// Add adds u2 to u: CPU, memory-seconds, bytes and wall time sum, the
// peak is the larger peak.
func (u *Usage) Add(u2 Usage) {
	u.CPUMicros += u2.CPUMicros
	u.PeakMemoryBytes = max(u.PeakMemoryBytes, u2.PeakMemoryBytes)
	u.MemoryByteSeconds += u2.MemoryByteSeconds
	u.BytesWritten += u2.BytesWritten
	u.NetworkBytes += u2.NetworkBytes
	u.WallMillis += u2.WallMillis
}

// Residue is the evidence of a sandbox's teardown: what was found left
// over after Stop. It is empty when teardown is proven complete, and it is
// what a lease records as its residue. A zombie (an exited process not yet
// reaped by its parent) runs nothing and is not residue.
type Residue struct {
	Processes []int    `json:"processes,omitempty"` // host pids still alive
	Cgroups   []string `json:"cgroups,omitempty"`   // cgroup directories not removed
	Mounts    []string `json:"mounts,omitempty"`    // mount points not unmounted
	Paths     []string `json:"paths,omitempty"`     // files or directories not removed
	Other     []string `json:"other,omitempty"`     // anything else, described
}

// Empty reports whether r records no residue.
func (r *Residue) Empty() bool {
	return len(r.Processes)+len(r.Cgroups)+len(r.Mounts)+len(r.Paths)+len(r.Other) == 0
}

// SandboxHandleVersion is the version of the SandboxHandle encoding.
const SandboxHandleVersion = 1

// SandboxHandle identifies a provider's sandbox. Its encoding is opaque to
// the control plane, which stores it as the lease's SandboxRef and gives it
// back to Provider.Recover after a restart.
type SandboxHandle struct {
	Version    int               `json:"v"`
	Provider   string            `json:"provider"`
	LeaseID    string            `json:"lease_id"`
	ComputerID string            `json:"computer_id"`
	Generation int64             `json:"generation"`
	Workspace  string            `json:"workspace"`
	Limits     Limits            `json:"limits"`
	NetNS      string            `json:"netns,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	// State is the provider's own fields, which only it reads.
	State json.RawMessage `json:"state,omitempty"`
}

// NewSandboxHandle returns a handle of the current version for spec,
// carrying the provider's state encoded as JSON.
func NewSandboxHandle(provider string, spec LeaseSpec, state any) (*SandboxHandle, error) {
	h := &SandboxHandle{
		Version: SandboxHandleVersion, Provider: provider,
		LeaseID: spec.LeaseID, ComputerID: spec.ComputerID, Generation: spec.Generation,
		Workspace: spec.Workspace, Limits: spec.Limits, NetNS: spec.NetNS, Env: spec.Env,
	}
	if state != nil {
		b, err := json.Marshal(state)
		if err != nil {
			return nil, err
		}
		h.State = b
	}
	return h, nil
}

// Encode returns the handle's JSON encoding.
func (h *SandboxHandle) Encode() ([]byte, error) {
	return json.Marshal(h)
}

// DecodeSandboxHandle decodes an encoded handle and checks that it is of
// the current version and of the named provider; anything else is EINVALID.
func DecodeSandboxHandle(b []byte, provider string) (*SandboxHandle, error) {
	var h SandboxHandle
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, Errorf(EINVALID, "sandbox handle is not valid JSON")
	} else if h.Version != SandboxHandleVersion {
		return nil, Errorf(EINVALID, "sandbox handle version %d is not supported (want %d)", h.Version, SandboxHandleVersion)
	} else if h.Provider != provider {
		return nil, Errorf(EINVALID, "sandbox handle is for provider %q, not %q", h.Provider, provider)
	}
	spec := LeaseSpec{LeaseID: h.LeaseID, ComputerID: h.ComputerID, Generation: h.Generation, Workspace: h.Workspace, Limits: h.Limits, NetNS: h.NetNS, Env: h.Env}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return &h, nil
}
