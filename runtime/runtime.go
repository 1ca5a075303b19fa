// Package runtime is the protocol between the control plane and the
// runtimes that run its leases (package agent). The runtime always dials
// out: an agent polls the control plane for the desired state of the
// leases assigned to it, and reports back what happened, each report
// authenticated by a short-lived lease credential (see Signer) bound to
// {tenant, computer, lease, generation, expiry}. Everything a runtime sends
// is fenced by the generation in its credential, so a runtime of an older
// generation can never commit a revision, append events or finish a
// command.
//
// The protocol is level-triggered: a poll answer is the whole desired
// state of the agent's leases (start, stop, checkpoint, and per command run
// once, ask, attach or cancel), and the agent acts on it idempotently. A
// command is sent to run exactly once, when it is dispatched; after a
// break the control plane only asks about it, and the per-lease supervisor
// answers exactly because it journals a command before starting it. Events
// carry their seq: the control plane stores each seq once and acknowledges
// the newest, and the agent resumes after it, so delivery survives a
// restart of either side. Each command's events travel in their own
// request stream, so one noisy command cannot stall another's.
//
// Control is the interface both sides share; Handler serves it over HTTP
// and Client calls it over HTTP. The embedded server's in-process agent
// uses Client too: the same protocol, over loopback.
package runtime

import (
	"context"
	"time"

	"github.com/bothyhq/bothy"
)

// Actions on a command in a poll answer.
const (
	// ActRun: run the command. Sent exactly once, when the command is
	// dispatched; the agent passes it to the lease's supervisor, which
	// starts nothing for a command id it already journaled.
	ActRun = "run"
	// ActStatus: report what the supervisor knows of the command (the
	// control plane lost track of it: may_have_started).
	ActStatus = "status"
	// ActAttach: the command runs; stream its events after AfterSeq.
	ActAttach = "attach"
	// ActCancel: kill the command's process tree.
	ActCancel = "cancel"
)

// PollRequest is an agent's poll.
type PollRequest struct {
	AgentID string `json:"agent_id"`
	// Leases are the leases the agent holds: started, starting or found on
	// disk after a restart.
	Leases []HeldLease `json:"leases"`
	// Version is the Version of the agent's previous answer (0 at first):
	// the poll returns at once if the desired state moved on since, and
	// otherwise waits up to Wait for it to.
	Version int64         `json:"version"`
	Wait    time.Duration `json:"wait"`
}

// HeldLease is one lease an agent holds.
type HeldLease struct {
	LeaseID    string `json:"lease_id"`
	TenantID   string `json:"tenant_id"`
	Generation int64  `json:"generation"`
	// Starting says the lease is not ready on the agent yet: it is being
	// started, or was found on disk after a restart and is being resumed.
	// Such a lease takes no command until the agent reports it Ready.
	Starting bool `json:"starting,omitempty"`
}

// PollResponse is the desired state of the agent's leases.
type PollResponse struct {
	Version int64        `json:"version"`
	Leases  []*LeaseWork `json:"leases"`
}

// LeaseWork is the desired state of one lease. A lease the agent holds
// that is not listed is released: the agent tears it down.
type LeaseWork struct {
	LeaseID    string `json:"lease_id"`
	TenantID   string `json:"tenant_id"`
	ComputerID string `json:"computer_id"`
	Generation int64  `json:"generation"`
	Provider   string `json:"provider"`
	// Credential authenticates the agent's reports about this lease until
	// CredentialExpires; every answer carries a fresh one.
	Credential        string    `json:"credential"`
	CredentialExpires time.Time `json:"credential_expires"`
	// HashKey is the tenant's checkpoint key (checkpoint.NewRepo).
	HashKey []byte `json:"hash_key"`
	// Revision is the computer's current revision: the base to
	// materialize when starting, and the base of the next commit. RootDigest,
	// Packs, Size and FileCount are that revision's (empty for revision 0).
	Revision   int64        `json:"revision"`
	RootDigest string       `json:"root_digest,omitempty"`
	Packs      []string     `json:"packs,omitempty"`
	Size       int64        `json:"size,omitempty"`
	FileCount  int64        `json:"file_count,omitempty"`
	Limits     bothy.Limits `json:"limits"`
	// Egress is the computer's egress policy: the agent gives a lease
	// whose mode is not none a network namespace whose only way out is
	// its egress broker.
	Egress bothy.EgressPolicy `json:"egress"`
	// Stop asks the agent to checkpoint, tear the lease down and report it
	// released.
	Stop bool `json:"stop,omitempty"`
	// Checkpoint, when above the last one the agent did, asks for a
	// checkpoint now, answered with Checkpointed.
	Checkpoint int64          `json:"checkpoint,omitempty"`
	Commands   []*CommandWork `json:"commands,omitempty"`
	// Applies are file changes made through the files API, to be applied
	// to the lease's disk and committed; each is answered with Applied.
	Applies []*ApplyWork `json:"applies,omitempty"`
}

// ApplyWork asks the runtime to make its disk go from the revision Base
// (whose root and packs are BaseRoot and BasePacks) to the tree Root, by
// applying their differences to the workspace, and to commit. A runtime
// whose last commit is not Base answers a conflict: its disk moved on.
type ApplyWork struct {
	ID        int64    `json:"id"`
	Base      int64    `json:"base"`
	BaseRoot  string   `json:"base_root"`
	BasePacks []string `json:"base_packs"`
	Root      string   `json:"root"`
	Packs     []string `json:"packs"`
}

// AppliedRequest answers an ApplyWork: the revision committed, or an
// error with its code.
type AppliedRequest struct {
	ID       int64        `json:"id"`
	Revision int64        `json:"revision"`
	Error    *bothy.Error `json:"error,omitempty"`
}

// CommandWork is one action on a command of a lease.
type CommandWork struct {
	CommandID string `json:"command_id"`
	Action    string `json:"action"`
	// Spec is the command, for ActRun only.
	Spec *bothy.RunSpec `json:"spec,omitempty"`
	// AfterSeq is the newest seq the control plane stored: stream after it.
	AfterSeq int64 `json:"after_seq"`
}

// ReadyRequest reports a lease's sandbox ready.
type ReadyRequest struct {
	Host       string `json:"host"`
	SandboxRef string `json:"sandbox_ref"`
}

// ReleaseRequest reports a lease torn down.
type ReleaseRequest struct {
	Disposition string `json:"disposition"` // a bothy.Lease* disposition
	Residue     string `json:"residue"`     // JSON bothy.Residue, "" if none
	Error       string `json:"error,omitempty"`
	// Usage is what the lease's sandbox consumed in all (a provider's
	// bothy.LeaseMeter), when the provider can tell: the control plane
	// charges the computer what its commands were not charged.
	Usage *bothy.Usage `json:"usage,omitempty"`
}

// CommitRequest commits a checkpoint of the lease's workspace as the next
// revision after Base.
type CommitRequest struct {
	Base       int64    `json:"base"`
	RootDigest string   `json:"root_digest"`
	Packs      []string `json:"packs"`
	Size       int64    `json:"size"`
	FileCount  int64    `json:"file_count"`
}

// CheckpointedRequest answers a LeaseWork.Checkpoint request.
type CheckpointedRequest struct {
	Checkpoint int64  `json:"checkpoint"`
	Revision   int64  `json:"revision"`
	Error      string `json:"error,omitempty"`
}

// Report is what the runtime knows of a command.
type Report struct {
	// State is one of the bothy.Run* states, as the supervisor's status
	// says it.
	State string `json:"state"`
	// Exit is how the process ended (bothy.RunFinished).
	Exit *bothy.Exit `json:"exit,omitempty"`
	// Error says why (bothy.RunFailed, bothy.RunLost).
	Error string `json:"error,omitempty"`
	// LastSeq is the newest seq the runtime holds for the command; a
	// finished report is accepted only once the control plane stored every
	// event up to it.
	LastSeq int64 `json:"last_seq"`
	// RevisionAfter is the revision committed after the command ended.
	RevisionAfter int64 `json:"revision_after,omitempty"`
	// OutputDigest names the blob that archives the command's output.
	OutputDigest string `json:"output_digest,omitempty"`
}

// EventsResponse acknowledges stored events.
type EventsResponse struct {
	LastSeq int64 `json:"last_seq"`
}

// Control is the control plane as a runtime sees it. Poll is authenticated
// by the agent's token; every other call by a lease credential, whose
// claims name the tenant, computer, lease and generation the call acts
// for. A token or credential that is missing, forged or expired is
// EUNAUTHORIZED. A call fenced by a generation that is no longer the
// computer's, or by a lease that was released, is ECONFLICT and changes
// nothing. A command that does not exist, or belongs to another computer
// than the credential's (of the same tenant or another), is ENOTFOUND.
// runtimetest is the conformance suite.
type Control interface {
	// Poll heartbeats the leases the agent holds and answers the desired
	// state of every lease assigned to it. An agent id that is not a valid
	// id is EINVALID. The answer comes at once when req.Version is behind
	// the control plane's, else when the desired state changes or req.Wait
	// passes. A lease that is not ready gets no commands; a ready one gets
	// each admitted command once as ActRun (with its Spec), each running
	// one as ActAttach after its newest stored seq, plus ActCancel when it
	// was cancelled, and ActStatus for one that may have started. A lease
	// that was released is not listed: its agent tears it down. At an
	// agent's first poll to a control-plane process, a lease an earlier
	// process assigned to the agent that the poll does not list is
	// released as lost, and a listed lease that is Starting is sent no
	// command until the agent reports it Ready.
	Poll(ctx context.Context, agentToken string, req *PollRequest) (*PollResponse, error)
	// Ready reports the lease's sandbox ready: the computer becomes active
	// and its admitted commands are dispatched at the next poll. A released
	// lease is ECONFLICT.
	Ready(ctx context.Context, cred string, req *ReadyRequest) error
	// Released reports the lease torn down with a bothy.Lease* disposition
	// (another is EINVALID): the computer becomes cold, the lease's
	// commands that did not finish are lost, a disposition of failed fails
	// the commands waiting for it with req.Error, and commands admitted
	// meanwhile start a lease of the next generation. Reporting the same
	// lease released again is not an error.
	Released(ctx context.Context, cred string, req *ReleaseRequest) error
	// Commit commits the lease's checkpoint as the revision after
	// req.Base, by compare-and-swap: a base that is not the computer's
	// current revision is ECONFLICT. The answer's Packs are not part of it;
	// the next poll carries them.
	Commit(ctx context.Context, cred string, req *CommitRequest) (*bothy.Revision, error)
	// Checkpointed answers a LeaseWork.Checkpoint request with the
	// revision the lease's disk is at, or the error that stopped the
	// checkpoint, which the API's Checkpoint call then returns.
	Checkpointed(ctx context.Context, cred string, req *CheckpointedRequest) error
	// Applied answers an ApplyWork. An answer about a change nobody waits
	// for any more is no error; a lease that is not running here is
	// ECONFLICT.
	Applied(ctx context.Context, cred string, req *AppliedRequest) error
	// Report moves the command to the state the runtime reports: running,
	// or an end (finished, with Exit saying completed, timed out or
	// cancelled; failed; lost), accepted only once the control plane
	// stored every event up to req.LastSeq (else ECONFLICT). A report
	// about a command that has ended changes nothing and is no error.
	// never_seen admits again a command that was sent to run or may have
	// started, for a later dispatch; of a running command it is ECONFLICT.
	// An unknown state is EINVALID.
	Report(ctx context.Context, cred, commandID string, req *Report) error
	// AppendEvents stores a command's events (each with its seq; a seq
	// already stored with the same content is a no-op, with other content
	// ECONFLICT, and one past the newest+1 EINVALID) and returns the newest
	// stored seq, which the runtime acknowledges to its supervisor. A
	// command that has ended takes no events (ECONFLICT).
	AppendEvents(ctx context.Context, cred, commandID string, events []bothy.Event) (*EventsResponse, error)
	// AgentCredential gives agent req.AgentID a new agent token (a store
	// token whose only scope is agent:ID) that expires after the control
	// plane's credential lifetime, for token: a join token of that agent
	// (scope enrol:ID), which it consumes (a second use is
	// EUNAUTHORIZED), or the agent's current agent token, which it
	// revokes (a renewal). The server's own agent token gets none
	// (EUNAUTHORIZED): it never expires and stays in-process.
	AgentCredential(ctx context.Context, token string, req *CredentialRequest) (*CredentialResponse, error)
}

// CredentialRequest asks AgentCredential for an agent token.
type CredentialRequest struct {
	AgentID string `json:"agent_id"`
}

// CredentialResponse is a new agent token and when it expires.
type CredentialResponse struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}
