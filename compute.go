package bothy

import "context"

// Limits on a RunRequest beyond those of Command.
const (
	MaxStdinBytes = 1 << 20 // standard input given with a run request
)

// RunRequest is a caller's request to run a command on a computer.
// Exactly one of Argv and Script is set.
type RunRequest struct {
	Argv   []string `json:"argv,omitempty"`
	Script string   `json:"script,omitempty"` // run as bash -c SCRIPT
	// Cwd is relative to the workspace root; "" is the root.
	Cwd string            `json:"cwd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// Stdin is the command's whole standard input, at most MaxStdinBytes.
	Stdin     string `json:"stdin,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	// IdempotencyKey makes the request safe to retry: a second request
	// with the same key on the same computer returns the first command and
	// starts nothing.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// WorkJobID is the caller's external reference for the command's
	// receipt; "" takes the computer's.
	WorkJobID string `json:"work_job_id,omitempty"`
	// Secrets names secrets of the tenant to give the command in its
	// environment; the caller's authority must list each. Their values
	// are never stored, and are redacted from the command's output.
	Secrets []SecretRef `json:"secrets,omitempty"`
	// Limits are the command's own limits, within its lease's: memory,
	// pids and CPU for its processes together, and the size a file may
	// grow to. Zero fields leave the lease's. Only a provider that can
	// limit one command (bwrap) runs a command with limits.
	Limits Limits `json:"limits,omitzero"`
	// Wait asks the API to answer only when the command has ended.
	Wait bool `json:"wait,omitempty"`
	// Authority is the caller's, set by the API from its token, never
	// from the request body. Nil is the server itself (tests, benchmarks):
	// only the computer's own budget applies.
	Authority *Authority `json:"-"`
}

// Validate reports whether r can be admitted.
func (r *RunRequest) Validate() error {
	if len(r.WorkJobID) > MaxWorkJobIDLen {
		return Errorf(EINVALID, "work_job_id must be at most %d bytes", MaxWorkJobIDLen)
	} else if err := r.Spec().Validate(); err != nil {
		return err
	}
	return validateSecretRefs(r.Secrets, r.Env)
}

// Spec returns the command that r runs, without the values of its
// secrets, which are read only when it is dispatched.
func (r *RunRequest) Spec() *RunSpec {
	return &RunSpec{Argv: r.Argv, Script: r.Script, Cwd: r.Cwd, Env: r.Env, Stdin: []byte(r.Stdin), TimeoutMS: r.TimeoutMS, Limits: r.Limits}
}

// MaxCommandSecrets bounds the secrets of one command.
const MaxCommandSecrets = 64

// validateSecretRefs normalizes refs and checks that each is valid and
// that no two, nor a ref and an env variable, set the same variable.
func validateSecretRefs(refs []SecretRef, env map[string]string) error {
	if len(refs) > MaxCommandSecrets {
		return Errorf(EINVALID, "a command may have at most %d secrets", MaxCommandSecrets)
	}
	seen := map[string]bool{}
	for i := range refs {
		refs[i].Normalize()
		if err := refs[i].Validate(); err != nil {
			return err
		} else if _, ok := env[refs[i].Env]; ok || seen[refs[i].Env] {
			return Errorf(EINVALID, "environment variable %s is set twice (by a secret and another secret or env)", refs[i].Env)
		}
		seen[refs[i].Env] = true
	}
	return nil
}

// ComputeService runs computers: it starts a lease lazily for the first
// command, streams events, stops idle computers and tears leases down. It
// is what the public API calls for everything beyond stored records.
// Every method is scoped by tenant: a computer or command that does not
// exist, or is another tenant's, is ENOTFOUND. computetest is the
// conformance suite.
type ComputeService interface {
	// RunCommand admits a command on the computer, starting a lease if the
	// computer is cold, and returns it at once (created false when the
	// idempotency key named an existing command, which is returned as it
	// is and not run again). A request that fails RunRequest.Validate is
	// its error (EINVALID, ETOOLARGE); a destroyed computer is ECONFLICT.
	RunCommand(ctx context.Context, tenantID, computerID string, req RunRequest) (cmd *Command, created bool, err error)
	// WaitCommand blocks until the command is in a terminal state, or ctx
	// is done (whose error it returns), and returns it; a command that has
	// ended is returned at once.
	WaitCommand(ctx context.Context, tenantID, commandID string) (*Command, error)
	// WaitEvents blocks until the command has an event after seq after, or
	// is in a terminal state, or ctx is done (whose error it returns).
	WaitEvents(ctx context.Context, tenantID, commandID string, after int64) error
	// CancelCommand cancels a command: an admitted one never runs, a
	// running one has its process tree killed, and it ends cancelled
	// (perhaps only once its runtime reports it: WaitCommand waits). A
	// command that has ended is returned as it is.
	CancelCommand(ctx context.Context, tenantID, commandID string) (*Command, error)
	// StopComputer checkpoints an active computer, releases its lease and
	// returns it cold; a cold one is returned as it is, and its next
	// command starts a new lease. A destroyed computer is ECONFLICT.
	StopComputer(ctx context.Context, tenantID, computerID string) (*Computer, error)
	// DestroyComputer stops the computer if it runs, recording the
	// teardown's residue on its lease, and marks it destroyed; a destroyed
	// computer is returned as it is.
	DestroyComputer(ctx context.Context, tenantID, computerID string) (*Computer, error)
	// Checkpoint commits the workspace of an active computer now and
	// returns the newest revision; for a cold computer it returns the
	// newest revision without committing. A computer that never committed
	// is at revision 0 (Number 0, with no tree).
	Checkpoint(ctx context.Context, tenantID, computerID string) (*Revision, error)
}
