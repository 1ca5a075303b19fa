package bothy

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Command states. A command is dispatched at most once: nothing moves it
// back to admitted after dispatch except a runtime's exact answer that it
// never saw the command (see CanTransition).
const (
	CommandAdmitted       = "admitted"         // accepted and journaled, not yet sent to a runtime
	CommandDispatched     = "dispatched"       // sent to a runtime once; no acknowledgement yet
	CommandRunning        = "running"          // the runtime acknowledged it and started the process
	CommandMayHaveStarted = "may_have_started" // dispatched, and the acknowledgement never came
	CommandCompleted      = "completed"        // the process exited (any exit code) or was killed by a signal
	CommandFailed         = "failed"           // it could not run (no capacity, bad cwd, sandbox failed)
	CommandCancelled      = "cancelled"        // a caller cancelled it
	CommandTimedOut       = "timed_out"        // its timeout killed it
	CommandLost           = "lost"             // the runtime generation that held it is gone; the caller decides
)

// ValidCommandState reports whether s is one of the command states.
func ValidCommandState(s string) bool {
	_, ok := commandTransitions[s]
	return ok
}

// CommandTerminal reports whether s is a terminal state, which never changes.
func CommandTerminal(s string) bool {
	switch s {
	case CommandCompleted, CommandFailed, CommandCancelled, CommandTimedOut, CommandLost:
		return true
	}
	return false
}

// commandTransitions lists, for each state, the states TransitionCommand may
// move it to. admitted → dispatched is missing on purpose: only
// DispatchCommand makes it, so that it happens at most once.
var commandTransitions = map[string][]string{
	CommandAdmitted:       {CommandCancelled, CommandFailed},
	CommandDispatched:     {CommandRunning, CommandMayHaveStarted, CommandFailed},
	CommandRunning:        {CommandCompleted, CommandFailed, CommandCancelled, CommandTimedOut, CommandLost},
	CommandMayHaveStarted: {CommandRunning, CommandLost, CommandAdmitted},
	CommandCompleted:      nil,
	CommandFailed:         nil,
	CommandCancelled:      nil,
	CommandTimedOut:       nil,
	CommandLost:           nil,
}

// CanTransition reports whether TransitionCommand may move a command from
// state from to state to:
//
//	admitted         → cancelled | failed                 (dispatched only by DispatchCommand)
//	dispatched       → running | may_have_started | failed
//	running          → completed | failed | cancelled | timed_out | lost
//	may_have_started → running | lost | admitted
//	completed, failed, cancelled, timed_out, lost: terminal, never change
//
// may_have_started → admitted is allowed only on the word of the runtime
// generation the command was dispatched to, which journals every command id
// durably before starting its process: if that runtime answers that it never
// saw the command, the command did not start, and may be dispatched once
// more. TransitionCommand therefore requires the command's generation for
// it (see RuntimeOnly) and clears the lease, generation and dispatch time.
// If that runtime answers that the command is running or finished, the
// command goes to running (and from there to its end); if that generation is
// gone, to lost.
func CanTransition(from, to string) bool {
	return slices.Contains(commandTransitions[from], to)
}

// RuntimeOnly reports whether only a runtime's report can justify moving a
// command from state from to state to: into running, completed or
// timed_out, and may_have_started → admitted. TransitionCommand requires a
// non-zero CommandUpdate.Generation for these.
func RuntimeOnly(from, to string) bool {
	switch to {
	case CommandRunning, CommandCompleted, CommandTimedOut:
		return true
	case CommandAdmitted:
		return from == CommandMayHaveStarted
	}
	return false
}

// Limits on a command's request.
const (
	MaxCommandArgs       = 4096
	MaxCommandBytes      = 1 << 20 // argv plus script
	MaxIdempotencyKeyLen = 256
)

// Command is one execution with a durable identity. Exactly one of Argv and
// Script is set. Zero times are unset.
type Command struct {
	ID         string `json:"id"`
	TenantID   string `json:"-"`
	ComputerID string `json:"computer_id"`
	// IdempotencyKey is unique per computer; "" means none.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// WorkJobID is the caller's external reference, stated in the
	// command's receipt: the run request's, else the computer's.
	WorkJobID string   `json:"work_job_id,omitempty"`
	Argv      []string `json:"argv,omitempty"`
	Script    string   `json:"script,omitempty"`
	Cwd       string   `json:"cwd,omitempty"`
	// EnvNames lists the names of the environment variables the command was
	// given. Values are never stored.
	EnvNames []string `json:"env_names,omitempty"`
	// Secrets names the secrets it was given and the variables that held
	// them; values are never stored.
	Secrets []SecretRef `json:"secrets,omitempty"`
	// StdinBytes is the size of the standard input it was given. Stdin,
	// like environment values, is never stored: it is held in memory
	// until dispatch, and a command with stdin that a restart of the
	// server finds undispatched fails (see Error).
	StdinBytes int64 `json:"stdin_bytes,omitempty"`
	// Limits are its own limits, within its lease's (RunRequest.Limits).
	Limits    Limits `json:"limits,omitzero"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	State     string `json:"state"`
	// ExitCode is nil until the process exits; Signal names the signal that
	// killed it, if any ("SIGKILL").
	ExitCode *int   `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// LeaseID and Generation name the lease that the command was dispatched
	// to; they are empty while it is admitted.
	LeaseID    string `json:"lease_id,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// LastSeq is the seq of its newest event, 0 before the first.
	LastSeq      int64  `json:"last_seq"`
	OutputDigest string `json:"output_digest,omitempty"`
	// Truncated reports that retained output was cut (a truncated event was
	// appended); the full output is in the blob named by OutputDigest.
	Truncated    bool      `json:"truncated"`
	CreatedAt    time.Time `json:"created_at"`
	DispatchedAt time.Time `json:"dispatched_at,omitzero"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	FinishedAt   time.Time `json:"finished_at,omitzero"`
	DurationMS   int64     `json:"duration_ms"`
	// RevisionBefore is the computer's revision when the command was
	// dispatched (DispatchCommand records it).
	RevisionBefore int64 `json:"revision_before,omitempty"`
	// RevisionAfter is the revision committed by the checkpoint after the
	// command, 0 if none.
	RevisionAfter int64 `json:"revision_after,omitempty"`
	// AuthorityDigest is the digest of the authority it was admitted under
	// (Authority.Digest).
	AuthorityDigest string `json:"authority_digest,omitempty"`
	// Usage is what it consumed, set when it ends.
	Usage Usage `json:"usage"`
	// OOMKilled, PidsLimited and DiskLimited report the limits it hit.
	OOMKilled   bool `json:"oom_killed,omitempty"`
	PidsLimited bool `json:"pids_limited,omitempty"`
	DiskLimited bool `json:"disk_limited,omitempty"`
	// DiskFull reports that it failed because its runtime's disk had no
	// room for its output (Exit.DiskFull): what was journaled until then
	// is kept, the rest is lost.
	DiskFull bool `json:"disk_full,omitempty"`
	// Error says why a command failed or was lost ("" if it did not, or
	// nothing said why): the runtime's reason (a sandbox that ended,
	// a run its provider could not start), or the control plane's (its
	// environment values or stdin lost at a restart before dispatch).
	Error string `json:"error,omitempty"`
	// SandboxLost reports that the lease's sandbox died while the command
	// ran (its init was killed: the host's OOM killer, a crash), which
	// killed the command with it.
	SandboxLost bool `json:"sandbox_lost,omitempty"`
}

// MaxCommandErrorLen bounds a command's stored Error; a longer reason is
// cut.
const MaxCommandErrorLen = 4096

// Validate reports whether c can be created.
func (c *Command) Validate() error {
	if err := ValidateID("command id", c.ID); err != nil {
		return err
	} else if err := ValidateID("tenant id", c.TenantID); err != nil {
		return err
	} else if err := ValidateID("computer id", c.ComputerID); err != nil {
		return err
	} else if len(c.IdempotencyKey) > MaxIdempotencyKeyLen {
		return Errorf(EINVALID, "idempotency key must be at most %d bytes", MaxIdempotencyKeyLen)
	} else if len(c.WorkJobID) > MaxWorkJobIDLen {
		return Errorf(EINVALID, "work_job_id must be at most %d bytes", MaxWorkJobIDLen)
	} else if err := validateProgram(c.Argv, c.Script); err != nil {
		return err
	} else if c.TimeoutMS < 0 {
		return Errorf(EINVALID, "command timeout must not be negative")
	} else if l := c.Limits; l.MemoryBytes < 0 || l.Pids < 0 || l.CPUMillis < 0 || l.ScratchBytes < 0 || l.OpenFiles < 0 {
		return Errorf(EINVALID, "command limits must not be negative")
	} else if len(c.Cwd) > 4096 {
		return Errorf(EINVALID, "command cwd must be at most 4096 bytes")
	} else if c.StdinBytes < 0 || c.StdinBytes > MaxStdinBytes {
		return Errorf(EINVALID, "command stdin_bytes must be 0 to %d", MaxStdinBytes)
	}
	for _, name := range c.EnvNames {
		if err := validateEnvName(name); err != nil {
			return err
		}
	}
	return validateSecretRefs(c.Secrets, nil)
}

// validateProgram is the one check of what a command runs, made by every
// Validate that holds one (RunRequest, RunSpec, ExecSpec, Command): exactly
// one of argv and script, a program that is not empty, no NUL byte, and
// at most MaxCommandArgs arguments and MaxCommandBytes in all.
func validateProgram(argv []string, script string) error {
	if (len(argv) == 0) == (script == "") {
		return Errorf(EINVALID, "a command needs exactly one of argv and script")
	} else if len(argv) > 0 && argv[0] == "" {
		return Errorf(EINVALID, "a command's program must not be empty")
	} else if len(argv) > MaxCommandArgs {
		return Errorf(ETOOLARGE, "a command may have at most %d arguments", MaxCommandArgs)
	}
	n := len(script)
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return Errorf(EINVALID, "a command's arguments must not hold NUL bytes")
		}
		n += len(a)
	}
	if strings.IndexByte(script, 0) >= 0 {
		return Errorf(EINVALID, "a command's script must not hold NUL bytes")
	} else if n > MaxCommandBytes {
		return Errorf(ETOOLARGE, "command argv and script must be at most %d bytes", MaxCommandBytes)
	}
	return nil
}

// validateEnvName accepts a POSIX-like name: letters, digits and '_', not
// starting with a digit.
func validateEnvName(name string) error {
	if name == "" || len(name) > 256 {
		return Errorf(EINVALID, "environment variable names must be 1 to 256 bytes")
	}
	for i, c := range name {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return Errorf(EINVALID, "environment variable name %q may hold only letters, digits and '_'", name)
		}
	}
	return nil
}

// Run states: what the runtime that was sent a command knows of it. The
// per-lease supervisor's status says one, and the runtime reports it to
// the control plane as it is (runtime.Report).
const (
	// RunNeverSeen: the supervisor has no journal of the command, so it
	// never started it and it may be dispatched once more.
	RunNeverSeen = "never_seen"
	// RunRunning: accepted, and its process may be running.
	RunRunning = "running"
	// RunFinished: the process ended; its Exit says how.
	RunFinished = "finished"
	// RunFailed: the provider could not run the command.
	RunFailed = "failed"
	// RunLost: the supervisor that ran the command died while it ran; its
	// process was killed at the supervisor's restart, its output up to
	// then is kept, and it is never run again.
	RunLost = "lost"
)

// RunSpec is a command as a runtime runs it: what the control plane sends
// the runtime in a run action, what the runtime passes to the lease's
// supervisor, and, but for the secrets, what the supervisor journals
// before it starts the command.
type RunSpec struct {
	Argv   []string          `json:"argv,omitempty"`
	Script string            `json:"script,omitempty"`
	Cwd    string            `json:"cwd,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	// Secrets are the values of the command's secrets, by environment
	// variable: they join the command's environment, are written to no
	// file and are redacted from its output. A value must be text (UTF-8,
	// no NUL), and a variable must not also be in Env or SecretFiles.
	Secrets map[string]string `json:"secrets,omitempty"`
	// SecretFiles are secrets given as files (ExecSpec.SecretFiles):
	// variable → value, kept and redacted as Secrets are.
	SecretFiles map[string]string `json:"secret_files,omitempty"`
	Stdin       []byte            `json:"stdin,omitempty"`
	TimeoutMS   int64             `json:"timeout_ms,omitempty"`
	// Limits are the command's own limits, within the lease's
	// (ExecSpec.Limits).
	Limits Limits `json:"limits,omitzero"`
}

// Validate reports whether s can be run. It is the check that
// RunRequest.Validate makes at the API, and that a supervisor makes again
// on the run it is sent.
func (s *RunSpec) Validate() error {
	if len(s.Stdin) > MaxStdinBytes {
		return Errorf(ETOOLARGE, "stdin must be at most %d bytes", MaxStdinBytes)
	}
	// JSON would silently replace invalid UTF-8, and a secret changed on
	// the way would be neither right in the environment nor redacted.
	for _, m := range []map[string]string{s.Secrets, s.SecretFiles} {
		for k, v := range m {
			if !utf8.ValidString(v) {
				return Errorf(EINVALID, "secret %s is not valid UTF-8: a secret's value must be text", k)
			}
		}
	}
	return validateRun(s.Argv, s.Script, s.Cwd, s.timeout(), s.Limits, s.Env, s.Secrets, s.SecretFiles)
}

func (s *RunSpec) timeout() time.Duration { return time.Duration(s.TimeoutMS) * time.Millisecond }

// ExecSpec returns s as a provider runs it: its Env is a new map that holds
// s.Env and s.Secrets, and its Stdin, Stdout and Stderr are unset.
func (s *RunSpec) ExecSpec() ExecSpec {
	env := make(map[string]string, len(s.Env)+len(s.Secrets)+1)
	maps.Copy(env, s.Env)
	maps.Copy(env, s.Secrets)
	return ExecSpec{Argv: s.Argv, Script: s.Script, Cwd: s.Cwd, Env: env, Timeout: s.timeout(), SecretFiles: s.SecretFiles, Limits: s.Limits}
}

// Exit is how a command's process ended, as its exit event states it: the
// provider's result and what the supervisor adds.
type Exit struct {
	ExecResult
	// Cancelled reports that a cancel (or the supervisor's shutdown)
	// killed the command.
	Cancelled bool `json:"cancelled,omitempty"`
	// DroppedBytes counts the output dropped after the truncated event.
	DroppedBytes int64 `json:"dropped_bytes,omitempty"`
	// DiskFull reports that the supervisor's disk had no room for the
	// command's output: it was killed there, its output is incomplete,
	// and it ends failed.
	DiskFull bool `json:"disk_full,omitempty"`
	// SandboxLost reports that the lease's sandbox had ended when the
	// command did: the agent's word, not the supervisor's (see
	// Command.SandboxLost).
	SandboxLost bool `json:"sandbox_lost,omitempty"`
}

// CommandFilter selects commands of one tenant. Empty fields match all.
type CommandFilter struct {
	ComputerID    string
	LeaseID       string // commands dispatched to this lease
	State         string
	Offset, Limit int // Limit 0 means 100
}

// CommandUpdate is what TransitionCommand sets along with the state. Zero
// fields are left as they are.
type CommandUpdate struct {
	// Generation fences a runtime's report: if non-zero, the command must
	// have been dispatched at this generation and its lease must still be
	// unreleased at it, or the transition is ECONFLICT. Zero means the
	// control plane decides on its own (cancel an admitted command, mark a
	// command lost); RuntimeOnly transitions refuse it.
	Generation    int64
	ExitCode      *int
	Signal        string
	OutputDigest  string
	DurationMS    int64
	RevisionAfter int64
	// Usage, if set, is stored as the command's usage.
	Usage *Usage
	// OOMKilled, PidsLimited, DiskLimited, DiskFull and SandboxLost are
	// recorded when true.
	OOMKilled, PidsLimited, DiskLimited, DiskFull, SandboxLost bool
	// Error, if set, is stored as the command's Error (cut to
	// MaxCommandErrorLen bytes).
	Error string
	// StartedAt and FinishedAt default to now on entering running and a
	// terminal state respectively.
	StartedAt  time.Time
	FinishedAt time.Time
}

// CommandService stores the command journal. Every method is scoped by
// tenant: a command of another tenant is ENOTFOUND.
type CommandService interface {
	// CreateCommand stores c in state admitted (c.State must be "" or
	// admitted) and fills CreatedAt if it is zero, then returns created
	// true. If the computer already has a command with c's non-empty
	// IdempotencyKey, it stores nothing, fills *c with that command and
	// returns created false, whatever the rest of c says; of concurrent
	// calls with one key exactly one creates. An existing ID is ECONFLICT; a
	// missing computer is ENOTFOUND.
	CreateCommand(ctx context.Context, c *Command) (created bool, err error)
	// FindCommand returns the command, or ENOTFOUND.
	FindCommand(ctx context.Context, tenantID, id string) (*Command, error)
	// ListCommands returns the tenant's commands that match f, ordered by
	// creation time, then ID. Limit 0 means 100, capped at 1000; a negative
	// offset or limit is EINVALID.
	ListCommands(ctx context.Context, tenantID string, f CommandFilter) ([]*Command, error)
	// DispatchCommand moves the command from admitted to dispatched and
	// records the lease and generation it is sent to, by compare-and-swap,
	// so that of any number of calls exactly one succeeds: any other, or a
	// call for a command in another state, is ECONFLICT. The lease must be
	// the unreleased lease of the command's computer at generation, or the
	// call is ECONFLICT. A missing command or lease is ENOTFOUND. It
	// records the computer's current revision as RevisionBefore.
	DispatchCommand(ctx context.Context, tenantID, id, leaseID string, generation int64) (*Command, error)
	// TransitionCommand moves the command from one of the states from to
	// the state to, by compare-and-swap, and sets u's non-zero fields. Every
	// from → to must be allowed by CanTransition, and a RuntimeOnly one needs
	// u.Generation, or the call is EINVALID. A command in none of the states
	// from, or a stale u.Generation, is ECONFLICT and changes nothing; a
	// missing command is ENOTFOUND. It returns the updated command.
	TransitionCommand(ctx context.Context, tenantID, id string, from []string, to string, u CommandUpdate) (*Command, error)
}
