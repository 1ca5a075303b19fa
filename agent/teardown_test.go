package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/hostcache"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/supervisor"
	"github.com/bothyhq/bothy/testenv"
)

// scriptedControl is a control plane whose poll answers the test gives:
// each Poll hands its request to requests and returns what the test sends
// on answers, so the test orders every answer against what the agent
// does. Ready and Released are recorded.
type scriptedControl struct {
	runtime.Control // the rest is not called

	requests chan *runtime.PollRequest
	answers  chan *runtime.PollResponse
	ready    chan string // lease ids
	released chan releaseCall
	// releaseErr, if set, is returned by the next Released (once).
	releaseErr error

	mu sync.Mutex
}

type releaseCall struct {
	cred string
	req  *runtime.ReleaseRequest
}

func newScriptedControl() *scriptedControl {
	return &scriptedControl{requests: make(chan *runtime.PollRequest), answers: make(chan *runtime.PollResponse),
		ready: make(chan string, 16), released: make(chan releaseCall, 16)}
}

func (c *scriptedControl) Poll(ctx context.Context, _ string, req *runtime.PollRequest) (*runtime.PollResponse, error) {
	select {
	case c.requests <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case resp := <-c.answers:
		return resp, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *scriptedControl) Ready(_ context.Context, cred string, _ *runtime.ReadyRequest) error {
	c.ready <- strings.TrimSuffix(cred, "-cred")
	return nil
}

func (c *scriptedControl) Released(_ context.Context, cred string, req *runtime.ReleaseRequest) error {
	c.mu.Lock()
	err := c.releaseErr
	c.releaseErr = nil
	c.mu.Unlock()
	c.released <- releaseCall{cred, req}
	return err
}

// countingProvider is the process provider, counting the sandboxes it
// starts and the handles it is asked to stop.
type countingProvider struct {
	*process.Provider

	mu      sync.Mutex
	starts  int
	stopped []string // lease ids
}

func (p *countingProvider) Start(ctx context.Context, spec bothy.LeaseSpec) (*bothy.SandboxHandle, error) {
	p.mu.Lock()
	p.starts++
	p.mu.Unlock()
	return p.Provider.Start(ctx, spec)
}

func (p *countingProvider) Stop(ctx context.Context, h *bothy.SandboxHandle) (*bothy.Residue, error) {
	p.mu.Lock()
	p.stopped = append(p.stopped, h.LeaseID)
	p.mu.Unlock()
	return p.Provider.Stop(ctx, h)
}

func (p *countingProvider) counts() (int, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts, slices.Clone(p.stopped)
}

// agentEnv is what agents on one data directory share.
type agentEnv struct {
	dir  string
	ctl  *scriptedControl
	prov *countingProvider
	cfg  Config
	logs *testenv.Buffer
	// supervisors are the pids of the supervisors seen.
	supervisors []string
}

// newAgentEnv returns the configuration of an agent of the process
// provider and the copy workspace, which needs no privilege, whose
// supervisors are this test binary.
func newAgentEnv(t *testing.T) *agentEnv {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := localblob.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cache, err := hostcache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &agentEnv{dir: t.TempDir(), ctl: newScriptedControl(), prov: &countingProvider{Provider: process.New()}, logs: &testenv.Buffer{}}
	e.cfg = Config{ID: "agt_1", Dir: e.dir, Control: e.ctl, Token: "agent-token",
		Providers: map[string]bothy.Provider{process.Name: e.prov}, Blobs: blobs, Cache: cache,
		Workspace: hostcache.ModeCopy, SupervisorCommand: []string{exe, "supervisor"}, PollWait: time.Second,
		Logger: slog.New(slog.NewTextHandler(e.logs, nil))}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", e.logs.String())
		}
		// A failed test may leave a supervisor (they outlive their agent).
		files, _ := filepath.Glob(filepath.Join(e.dir, "leases", "*", "sup", "supervisor.pid"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil {
				e.supervisors = append(e.supervisors, strings.TrimSpace(string(b)))
			}
		}
		for _, pid := range e.supervisors {
			if n, err := strconv.Atoi(pid); err == nil && alive(pid) {
				t.Errorf("supervisor %d left running; killing it", n)
				syscall.Kill(n, syscall.SIGKILL)
			}
		}
	})
	return e
}

// run starts an agent on the environment; the returned function stops it
// and waits for its Run to return.
func (e *agentEnv) run(t *testing.T) (*Agent, func()) {
	t.Helper()
	a, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("agent Run did not return")
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

// work is the desired state of lease id of generation 1 as the control
// plane answers it, with the credential cred.
func work(id, cred string, stop bool) *runtime.LeaseWork {
	return &runtime.LeaseWork{LeaseID: id, TenantID: "ten_1", ComputerID: "cmp_1", Generation: 1, Provider: process.Name,
		Credential: cred, CredentialExpires: time.Now().Add(time.Hour), HashKey: bytes.Repeat([]byte{7}, 32), Stop: stop}
}

// answer waits for the agent's next poll and answers it with leases.
func (e *agentEnv) answer(t *testing.T, version int64, leases ...*runtime.LeaseWork) *runtime.PollRequest {
	t.Helper()
	req := e.next(t)
	e.reply(t, version, leases...)
	return req
}

func (e *agentEnv) next(t *testing.T) *runtime.PollRequest {
	t.Helper()
	select {
	case req := <-e.ctl.requests:
		return req
	case <-time.After(time.Minute):
		t.Fatal("the agent did not poll")
		return nil
	}
}

func (e *agentEnv) reply(t *testing.T, version int64, leases ...*runtime.LeaseWork) {
	t.Helper()
	if leases == nil {
		leases = []*runtime.LeaseWork{}
	}
	select {
	case e.ctl.answers <- &runtime.PollResponse{Version: version, Leases: leases}:
	case <-time.After(time.Minute):
		t.Fatal("the agent did not take the answer")
	}
}

func heldIDs(req *runtime.PollRequest) []string {
	var ids []string
	for _, h := range req.Leases {
		ids = append(ids, h.LeaseID)
	}
	return ids
}

// waitFor waits for cond, giving up (against a hang) after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (a *Agent) holds(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.leases[id]
	return ok
}

// supervisorPid is the pid of the lease's supervisor, as it wrote it.
func supervisorPid(t *testing.T, leaseDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(leaseDir, "sup", "supervisor.pid"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// alive reports whether the process pid runs (and is no zombie).
func alive(pid string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// TestAgent_LeaseOnDiskNoLongerListed: an agent restarts and finds on
// disk a lease that the control plane released meanwhile (lost to its
// TTL while no agent polled). The answer does not list it, so the agent
// tears it down, with neither a credential nor a supervisor client nor a
// sandbox handle of this process: it must not panic, and it must stop
// the lease's supervisor and sandbox, not only delete their directory.
func TestAgent_LeaseOnDiskNoLongerListed(t *testing.T) {
	t.Run("SupervisorAnswers", func(t *testing.T) { testLeaseOnDiskNoLongerListed(t, false) })
	// A supervisor whose socket is gone (removed with the temporary
	// directory that holds the sockets of long paths) still holds the
	// lease directory's lock: it is stopped through the pid it wrote.
	t.Run("SocketGone", func(t *testing.T) { testLeaseOnDiskNoLongerListed(t, true) })
}

func testLeaseOnDiskNoLongerListed(t *testing.T, socketGone bool) {
	e := newAgentEnv(t)
	_, stop := e.run(t)
	e.answer(t, 1, work("lse_1", "lse_1-cred", false))
	select {
	case <-e.ctl.ready:
	case <-time.After(time.Minute):
		t.Fatal("the lease did not become ready")
	}
	leaseDir := filepath.Join(e.dir, "leases", "lse_1")
	pid := supervisorPid(t, leaseDir)
	e.supervisors = append(e.supervisors, pid)
	if !alive(pid) {
		t.Fatalf("supervisor %s is not running", pid)
	}
	stop() // as a SIGTERM of serve: the supervisor keeps running
	if socketGone {
		if err := os.Remove(supervisor.SocketPath(filepath.Join(leaseDir, "sup"))); err != nil {
			t.Fatal(err)
		}
	}

	e.prov = &countingProvider{Provider: process.New()}
	e.cfg.Providers = map[string]bothy.Provider{process.Name: e.prov}
	a, _ := e.run(t)
	if req := e.answer(t, 2); !slices.Equal(heldIDs(req), []string{"lse_1"}) {
		t.Fatalf("the restarted agent holds %v, want [lse_1]", heldIDs(req))
	}
	waitFor(t, "the lease is torn down", func() bool { return !a.holds("lse_1") })
	if _, err := os.Lstat(leaseDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lease directory remains: %v", err)
	}
	if alive(pid) {
		t.Errorf("supervisor %s still runs after the teardown", pid)
	}
	if _, stopped := e.prov.counts(); !slices.Equal(stopped, []string{"lse_1"}) {
		t.Errorf("the provider stopped %v, want [lse_1]", stopped)
	}
	if strings.Contains(e.logs.String(), "panic") {
		t.Errorf("the log tells of a panic")
	}
}

// TestAgent_StaleAnswerAfterTeardown: a poll sent while a lease stops is
// answered from the state before the release, so it still lists the
// lease after the agent tore it down and forgot it. That answer must not
// start the lease again. And if the control plane did not hear the
// release, a later answer that lists it gets the release reported again,
// with the fresh credential, and still starts nothing.
func TestAgent_StaleAnswerAfterTeardown(t *testing.T) {
	for _, tc := range []struct {
		name       string
		releaseErr error
	}{
		{name: "Released"},
		{name: "ReportLost", releaseErr: errors.New("connection refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newAgentEnv(t)
			e.ctl.releaseErr = tc.releaseErr
			a, _ := e.run(t)
			e.answer(t, 1, work("lse_1", "lse_1-cred", false))
			select {
			case <-e.ctl.ready:
			case <-time.After(time.Minute):
				t.Fatal("the lease did not become ready")
			}
			e.answer(t, 2, work("lse_1", "lse_1-cred", true)) // stop it
			e.next(t)                                         // in flight while the lease stops
			select {
			case c := <-e.ctl.released:
				if c.req.Disposition != bothy.LeaseReleased {
					t.Fatalf("released %+v, want released", c.req)
				}
			case <-time.After(time.Minute):
				t.Fatal("the lease was not released")
			}
			waitFor(t, "the agent forgets the lease", func() bool { return !a.holds("lse_1") })
			e.reply(t, 2, work("lse_1", "lse_1-cred", true)) // produced before the release
			req := e.next(t)
			if held := heldIDs(req); len(held) != 0 {
				t.Errorf("after a stale answer the agent holds %v again, want none", held)
			}
			if tc.releaseErr != nil {
				// The control plane still lists the lease: it did not hear
				// of its release.
				e.reply(t, 3, work("lse_1", "lse_1-cred2", false))
				select {
				case c := <-e.ctl.released:
					if c.cred != "lse_1-cred2" || c.req.Disposition != bothy.LeaseReleased {
						t.Errorf("the release was reported again as %+v with %q, want released with lse_1-cred2", c.req, c.cred)
					}
				case <-time.After(time.Minute):
					t.Fatal("the release was not reported again")
				}
				if held := heldIDs(e.next(t)); len(held) != 0 {
					t.Errorf("after the control plane listed the released lease the agent holds %v, want none", held)
				}
			}
			e.reply(t, 4)
			e.answer(t, 4)
			waitFor(t, "the agent holds nothing", func() bool { return !a.holds("lse_1") })
			a.mu.Lock()
			tombstones := len(a.gone)
			a.mu.Unlock()
			if tombstones != 0 {
				t.Errorf("%d tombstones kept after answers that no longer list the lease, want 0", tombstones)
			}
			if starts, _ := e.prov.counts(); starts != 1 {
				t.Errorf("the provider started %d sandboxes, want 1", starts)
			}
			if _, err := os.Lstat(filepath.Join(e.dir, "leases", "lse_1")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a lease directory remains: %v", err)
			}
		})
	}
}
