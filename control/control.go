// Package control is bothy's control plane: it admits commands, starts a
// lease lazily for a cold computer's first command, dispatches each command
// at most once to the runtime that holds the lease, stores the events the
// runtime streams back, and stops idle computers. It implements
// bothy.ComputeService for the public API and runtime.Control for the
// runtimes, which always dial out to it (package agent).
//
// Durable state lives in the Store; what is in memory (the leases an agent
// holds, requests to stop, cancel or checkpoint, and a command's
// environment values and stdin until it is dispatched) is rebuilt from the
// Store and from agents' polls after a restart, or its loss is made
// explicit (see Controller.Reconcile).
package control

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/receipt"
	"github.com/bothyhq/bothy/runtime"
)

// Defaults of Config.
const (
	DefaultLeaseTTL    = 60 * time.Second
	DefaultIdleTimeout = 5 * time.Minute
	DefaultMaxLifetime = 12 * time.Hour
	DefaultAckTimeout  = 15 * time.Second
	// DefaultAgentCredentialTTL is the lifetime of an enrolled agent's
	// token; the agent renews it at half its life.
	DefaultAgentCredentialTTL = 24 * time.Hour
	DefaultPollWait           = 10 * time.Second
	maxPollWait               = 30 * time.Second
	stopWait                  = 2 * time.Minute
	reconcileInterval         = 2 * time.Second
	fallbackWakeup            = time.Second
	agentFreshness            = 30 * time.Second
	unreleasedHorizon         = 100 * 365 * 24 * time.Hour // past every lease's expiry
	faultAfterDispatch        = "after_dispatch"
	faultAfterLease           = "after_lease_acquired"
	faultAfterAdmit           = "after_admit"
	faultBeforeRunReply       = "before_running_report"
)

// Config configures a Controller.
type Config struct {
	// Profiles maps each profile a computer may use to the provider that
	// serves it ("standard" → "bwrap"). A profile missing here is refused,
	// never served by another provider.
	Profiles map[string]string
	// Isolating names the providers that keep one command's processes
	// from another's in one sandbox (bothy.CommandIsolator). On any other
	// provider a lease is one trust domain for secrets (see
	// admitShared); a provider missing here is taken not to isolate.
	Isolating map[string]bool
	// AgentToken authenticates agents' polls.
	AgentToken string
	// Signer signs lease credentials; nil is a random key.
	Signer *runtime.Signer
	// Receipts signs the receipt of every command that ends and every
	// lease that is released; nil is a random key, whose receipts nobody
	// can verify after the process ends.
	Receipts *receipt.Signer
	// Version names the server's build in receipts' image digests.
	Version string
	// Limits are every lease's resource limits.
	Limits bothy.Limits
	// CommandTimeout is the timeout of a command whose run gives none
	// (Policy.CommandTimeoutMS); 0 is none.
	CommandTimeout time.Duration
	// PolicyDigest names the server's policy in receipts; "" is the
	// digest of Profiles alone.
	PolicyDigest string
	// Secrets hands out the secrets commands name, at dispatch; nil
	// fails every command that names one.
	Secrets bothy.SecretService
	// LeaseTTL is how long a lease lives without a heartbeat (an agent's
	// poll) before the reaper declares it lost.
	LeaseTTL time.Duration
	// IdleTimeout stops a computer that ran nothing for this long.
	IdleTimeout time.Duration
	// MaxLifetime stops a lease this long after it became ready, even if
	// busy.
	MaxLifetime time.Duration
	// AckTimeout is how long a dispatched command may wait for the
	// runtime's acknowledgement before the control plane asks about it
	// (may_have_started).
	AckTimeout time.Duration
	// AgentCredentialTTL is how long an agent token from AgentCredential
	// (enrolment or renewal) lives; 0 is DefaultAgentCredentialTTL.
	AgentCredentialTTL time.Duration
	// Fault, if set, is called at each fault-injection point, for crash
	// tests that kill the process there: "after_admit" (a command was
	// admitted, and neither a lease reserved for it nor an agent woken),
	// "after_lease_acquired" (a lease was reserved for a cold computer,
	// and no agent was told), "after_dispatch" (a command was dispatched,
	// and the poll answer carrying it is not sent yet) and
	// "before_running_report" (the runtime acknowledged a command, and the
	// control plane has not recorded it). Only tests set it (cmd/bothy's
	// fault_test.go, from BOTHY_FAULT): no production build reaches a
	// kill.
	Fault  func(point string)
	Logger *slog.Logger
}

// Controller is the control plane. Create it with New and run its
// background loop with Run.
type Controller struct {
	store  bothy.Store
	cfg    Config
	signer *runtime.Signer
	log    *slog.Logger

	receipts     *receipt.Signer
	policyDigest string // of cfg.Profiles, stated in every receipt
	now          func() time.Time

	// sharedMu orders the admissions that admitShared checks.
	sharedMu sync.Mutex

	mu       sync.Mutex
	version  int64
	wake     chan struct{} // closed and replaced when the desired state changes
	watch    map[string]*watch
	agents   map[string]time.Time // agent id → last poll
	leases   map[string]*leaseState
	specs    map[string]*bothy.RunSpec // command id → spec, until dispatched
	sentAt   map[string]time.Time      // command id → when this process dispatched it
	cancels  map[string]bool           // command id → cancel requested
	stops    map[string]bool           // computer id → stop requested
	hashKeys map[string][]byte         // tenant id → checkpoint key (immutable)

	applySeq int64

	// started is when the controller was made: a lease reserved before
	// was started by an earlier process.
	started time.Time

	stopping chan struct{} // closed when Run's context is done
	stopOnce sync.Once
}

// leaseState is what the controller knows of an unreleased lease.
type leaseState struct {
	id, tenantID, computerID string
	generation               int64
	provider                 string
	agent                    string // "" until an agent claims it
	ready                    bool
	readyAt, lastUsed        time.Time
	ckptWanted, ckptDone     int64
	ckptRevision             int64
	ckptErr                  string
	applies                  []*applyReq
	rev                      *bothy.Revision // the newest revision sent to the runtime
	// draining: the runtime refused a command sent to run (it is tearing
	// the lease down); nothing more is dispatched to the lease.
	draining bool
}

// New returns a controller over store.
func New(store bothy.Store, cfg Config) *Controller {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Signer == nil {
		cfg.Signer = runtime.NewSigner(nil)
	}
	if cfg.Receipts == nil {
		cfg.Receipts = receipt.NewSigner(nil)
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxLifetime <= 0 {
		cfg.MaxLifetime = DefaultMaxLifetime
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	if cfg.AgentCredentialTTL <= 0 {
		cfg.AgentCredentialTTL = DefaultAgentCredentialTTL
	}
	return &Controller{
		store: store, cfg: cfg, signer: cfg.Signer, log: cfg.Logger, now: time.Now, started: time.Now(),
		receipts: cfg.Receipts, policyDigest: cmp.Or(cfg.PolicyDigest, receipt.PolicyDigest(cfg.Profiles)),
		version: 1, // above an agent's first poll (0), which is answered at once
		wake:    make(chan struct{}), watch: map[string]*watch{},
		agents: map[string]time.Time{}, leases: map[string]*leaseState{},
		specs: map[string]*bothy.RunSpec{}, sentAt: map[string]time.Time{},
		cancels: map[string]bool{}, stops: map[string]bool{}, hashKeys: map[string][]byte{}, stopping: make(chan struct{}),
	}
}

var (
	_ bothy.ComputeService = (*Controller)(nil)
	_ runtime.Control      = (*Controller)(nil)
)

// changed records that the desired state moved on and wakes waiting polls.
func (c *Controller) changed() {
	c.mu.Lock()
	c.version++
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
}

// notify wakes the waiters on a command's events and state.
func (c *Controller) notify(commandID string) {
	c.mu.Lock()
	if w, ok := c.watch[commandID]; ok {
		close(w.ch)
		delete(c.watch, commandID)
	}
	c.mu.Unlock()
}

// watch is the waiters on one command: ch closes at the next notify.
type watch struct {
	ch chan struct{}
	n  int
}

// watcher returns a channel closed at the command's next notify, and a
// release the caller must call when it stops waiting, so that the
// controller keeps no entry for commands nobody waits on.
func (c *Controller) watcher(commandID string) (<-chan struct{}, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.watch[commandID]
	if !ok {
		w = &watch{ch: make(chan struct{})}
		c.watch[commandID] = w
	}
	w.n++
	return w.ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if w.n--; w.n == 0 && c.watch[commandID] == w {
			delete(c.watch, commandID)
		}
	}
}

// fault calls Config.Fault at the named fault-injection point.
func (c *Controller) fault(point string) {
	if c.cfg.Fault != nil {
		c.cfg.Fault(point)
	}
}

// Run runs the reconciler until ctx is done: it reaps leases whose runtime
// stopped polling, stops idle computers and those past their lifetime, and
// asks about commands whose acknowledgement is overdue.
func (c *Controller) Run(ctx context.Context) error {
	defer c.stopOnce.Do(func() { close(c.stopping) })
	if err := c.Reconcile(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped during the pass
		}
		return err
	}
	t := time.NewTicker(reconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := c.reap(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("reap leases", "err", err)
		}
		c.stopIdle(ctx)
	}
}

// Reconcile is the start-up pass: every command left dispatched by an
// earlier process may or may not have reached its runtime, so it becomes
// may_have_started, and the runtime is asked about it on its next poll;
// and a computer with admitted commands but no lease (the process died
// between admitting its first command and reserving the lease) gets one.
// The leases an earlier process left are settled at each agent's first
// poll (releaseUnheld, adopt).
func (c *Controller) Reconcile(ctx context.Context) error {
	tenants, err := c.store.ListTenants(ctx)
	if err != nil {
		return err
	}
	for _, t := range tenants {
		for {
			cmds, err := c.store.ListCommands(ctx, t.ID, bothy.CommandFilter{State: bothy.CommandDispatched, Limit: 1000})
			if err != nil {
				return err
			}
			for _, cmd := range cmds {
				if _, err := c.store.TransitionCommand(ctx, t.ID, cmd.ID, []string{bothy.CommandDispatched}, bothy.CommandMayHaveStarted, bothy.CommandUpdate{}); err != nil && bothy.ErrorCode(err) != bothy.ECONFLICT {
					return err
				}
				c.log.Info("command may have started before a restart; the runtime will be asked", "command", cmd.ID)
			}
			if len(cmds) < 1000 {
				break
			}
		}
		if err := c.leaseAdmitted(ctx, t.ID); err != nil {
			return err
		}
	}
	return nil
}

// leaseAdmitted starts a lease for every computer of the tenant whose
// admitted commands have none (ensureLease leaves one that has a lease).
func (c *Controller) leaseAdmitted(ctx context.Context, tenantID string) error {
	seen := map[string]bool{}
	for offset := 0; ; offset += 1000 {
		cmds, err := c.store.ListCommands(ctx, tenantID, bothy.CommandFilter{State: bothy.CommandAdmitted, Offset: offset, Limit: 1000})
		if err != nil {
			return err
		}
		for _, cmd := range cmds {
			if seen[cmd.ComputerID] {
				continue
			}
			seen[cmd.ComputerID] = true
			if err := c.ensureLease(ctx, tenantID, cmd.ComputerID); err != nil {
				c.log.Warn("start a lease for admitted commands", "computer", cmd.ComputerID, "err", err)
			}
		}
		if len(cmds) < 1000 {
			return nil
		}
	}
}

// errStopping answers waits when the server stops: long polls and event
// streams end, and their clients resume against the next server.
var errStopping = bothy.Errorf(bothy.EUNAVAILABLE, "the server is stopping; try again")

// newID returns prefix and 12 random bytes in hex.
func newID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
