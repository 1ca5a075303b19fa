package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	nethttp "net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/control"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/mountinfo"
	"github.com/bothyhq/bothy/server"
	"github.com/bothyhq/bothy/sqlite"
)

// serverEnv is an embedded bothy server, as `bothy serve` runs it, in this
// process: SQLite and a local blob directory under its data directory, the
// API on a loopback port, and the in-process agent with real supervisors
// and sandboxes. Close destroys every computer it created and checks that
// nothing of them is left.
type serverEnv struct {
	dir    string
	store  *sqlite.Store
	blobs  *localblob.Store
	tenant *bothy.Tenant
	srv    *server.Server
	hs     *nethttp.Server
	url    string
	token  string
	client *bhttp.Client
	stop   context.CancelFunc
	done   chan error
	// ops counts the calls of the agent into the bench's provider, unless
	// uncounted says why it does not (see counted).
	ops       *opCounter
	uncounted string

	mu        sync.Mutex // guards computers and leases: scenarios run commands concurrently
	computers []string
	leases    map[string]bool // every lease a command ran on
}

// startServer starts an embedded server over a new data directory dir.
func startServer(ctx context.Context, dir string, opts *RuntimeOptions) (e *serverEnv, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	e = &serverEnv{dir: dir, leases: map[string]bool{}, ops: newOpCounter()}
	defer func() {
		if err != nil {
			e.shutdown()
		}
	}()
	if e.store, err = sqlite.Open(ctx, filepath.Join(dir, "bothy.db")); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if e.blobs, err = localblob.Open(filepath.Join(dir, "blobs")); err != nil {
		return nil, fmt.Errorf("open blobs: %w", err)
	}
	if e.tenant, err = bothy.NewTenant("bench", "bench"); err != nil {
		return nil, err
	}
	if err := e.store.CreateTenant(ctx, e.tenant); err != nil {
		return nil, fmt.Errorf("create tenant: %w", err)
	}
	if _, e.token, err = e.store.CreateToken(ctx, e.tenant.ID, "bench", []string{bothy.ScopeAdmin}, time.Time{}); err != nil {
		return nil, fmt.Errorf("create token: %w", err)
	}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(logf, nil))
	secret := make([]byte, 16)
	rand.Read(secret)
	// The provider the bench's profile names is counted (see opCounter).
	profiles := map[string]string{"standard": "bwrap"}
	var provs []bothy.Provider
	for _, p := range opts.Providers {
		if p.Name() == profiles["standard"] {
			var hidden []string
			if p, hidden = counted(p, e.ops); len(hidden) > 0 {
				e.uncounted = fmt.Sprintf("the hook that counts them would hide %s of the %s provider from the agent; bench/opcount.go must learn to pass it on",
					strings.Join(hidden, ", "), p.Name())
			}
		}
		provs = append(provs, p)
	}
	e.srv, err = server.New(server.Config{
		Data: dir, Store: e.store, Blobs: e.blobs, Profiles: profiles,
		AgentToken: hex.EncodeToString(secret), Providers: provs, SupervisorCommand: opts.SupervisorCommand,
		AgentID: "bench", Logger: log,
		// No computer may stop for idleness while the bench uses it.
		Control: control.Config{IdleTimeout: time.Hour},
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.url = "http://" + ln.Addr().String()
	e.hs = &nethttp.Server{Handler: e.srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go e.hs.Serve(ln)
	runCtx, stop := context.WithCancel(context.Background())
	e.stop, e.done = stop, make(chan error, 1)
	go func() { e.done <- e.srv.Run(runCtx, e.url) }()
	// One keep-alive connection, as an agent's SDK would hold.
	e.client = bhttp.NewClient(e.url, e.token)
	e.client.HTTPClient = &nethttp.Client{Transport: &nethttp.Transport{MaxIdleConnsPerHost: 4}}
	if err := e.client.Health(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// create creates a cold computer and remembers it for Close.
func (e *serverEnv) create(ctx context.Context, req bhttp.CreateComputerRequest) (*bothy.Computer, error) {
	c, err := e.client.CreateComputer(ctx, req)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.computers = append(e.computers, c.ID)
	e.mu.Unlock()
	return c, nil
}

// run runs a command through the API, waits for its end, and fails unless
// it completed with exit code 0.
func (e *serverEnv) run(ctx context.Context, id string, req bothy.RunRequest) (*bothy.Command, error) {
	req.Wait = true
	cmd, err := e.client.RunCommand(ctx, id, req)
	if err != nil {
		return nil, err
	}
	return cmd, e.check(cmd)
}

// check records the command's lease and fails unless it exited 0.
func (e *serverEnv) check(cmd *bothy.Command) error {
	if cmd.LeaseID != "" {
		e.mu.Lock()
		e.leases[cmd.LeaseID] = true
		e.mu.Unlock()
	}
	if cmd.State != bothy.CommandCompleted || cmd.ExitCode == nil || *cmd.ExitCode != 0 {
		code := "none"
		if cmd.ExitCode != nil {
			code = fmt.Sprint(*cmd.ExitCode)
		}
		return fmt.Errorf("command %s %q: state %s, exit code %s (server log: %s)",
			cmd.ID, cmd.Argv, cmd.State, code, filepath.Join(e.dir, "serve.log"))
	}
	return nil
}

// seed commits the directory src as the next revision of a cold computer,
// as `bothy checkpoint` does: the workspace a computer starts from.
func (e *serverEnv) seed(ctx context.Context, id, src string) error {
	c, err := e.store.FindComputer(ctx, e.tenant.ID, id)
	if err != nil {
		return err
	}
	repo, err := checkpoint.NewRepo(e.blobs, e.tenant.ID, e.tenant.HashKey)
	if err != nil {
		return err
	}
	parent, _, err := repo.OpenRevision(ctx, e.store, c.ID, c.Revision)
	if err != nil {
		return err
	}
	res, err := repo.Checkpoint(ctx, src, parent, checkpoint.CheckpointOptions{})
	if err != nil {
		return err
	}
	_, err = e.store.CommitRevision(ctx, res.CommitRequest(c, "bench"))
	return err
}

// Close destroys every computer the bench created, stops the server, and
// returns what is left of them: processes, mounts, cgroups, lease
// directories, and the residue the agent recorded on each lease.
func (e *serverEnv) Close(ctx context.Context) (residue []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, id := range e.computers {
		if _, derr := e.client.DestroyComputer(ctx, id); derr != nil {
			err = errors.Join(err, fmt.Errorf("destroy %s: %w", id, derr))
		}
	}
	for id := range e.leases {
		l, ferr := e.store.FindLease(ctx, e.tenant.ID, id)
		switch {
		case ferr != nil:
			err = errors.Join(err, ferr)
		case l.Disposition != bothy.LeaseReleased || l.Residue != "":
			residue = append(residue, fmt.Sprintf("lease %s: disposition %q, residue %s", id, l.Disposition, l.Residue))
		}
	}
	e.shutdown()
	return append(residue, leftovers(e.dir, e.leases)...), err
}

// shutdown stops the server and closes the store.
func (e *serverEnv) shutdown() {
	if e.stop != nil {
		e.stop()
		<-e.done
	}
	if e.hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		e.hs.Shutdown(sctx)
		cancel()
	}
	if e.store != nil {
		e.store.Close()
	}
}

// logWarnings counts the warnings and errors of the server's log by
// level and message.
func (e *serverEnv) logWarnings() map[string]int {
	b, err := os.ReadFile(filepath.Join(e.dir, "serve.log"))
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for _, ln := range strings.Split(string(b), "\n") {
		_, rest, ok := strings.Cut(ln, " level=")
		if !ok || !strings.HasPrefix(rest, "WARN") && !strings.HasPrefix(rest, "ERROR") {
			continue
		}
		level, rest, _ := strings.Cut(rest, " ")
		msg, _ := strconv.Unquote(quoted(strings.TrimPrefix(rest, "msg=")))
		out[level+": "+msg]++
	}
	return out
}

// quoted returns the leading Go-quoted string of s, or its first word.
func quoted(s string) string {
	if !strings.HasPrefix(s, `"`) {
		w, _, _ := strings.Cut(s, " ")
		return strconv.Quote(w)
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return s[:i+1]
		}
	}
	return s
}

// leftovers looks on the host for anything of the data directory dir and
// the leases: mounts, processes whose command line names either, cgroups
// of the bwrap provider, and lease directories.
func leftovers(dir string, leases map[string]bool) []string {
	var out []string
	names := func(s string) bool {
		if strings.Contains(s, dir) {
			return true
		}
		for id := range leases {
			if strings.Contains(s, id) {
				return true
			}
		}
		return false
	}
	if mounts, err := mountinfo.Read(); err == nil {
		for _, m := range mounts {
			if names(m.Point) {
				out = append(out, "mount "+m.Point)
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && names(strings.ReplaceAll(string(b), "\x00", " ")) {
			out = append(out, fmt.Sprintf("process %s: %s", filepath.Base(filepath.Dir(p)), strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
	for id := range leases {
		for _, ctl := range []string{"memory", "pids", "cpu", "unified"} {
			p := filepath.Join("/sys/fs/cgroup", ctl, "bothy", id)
			if _, err := os.Stat(p); err == nil {
				out = append(out, "cgroup "+p)
			}
		}
	}
	if ls, _ := os.ReadDir(filepath.Join(dir, "agent", "leases")); len(ls) > 0 {
		out = append(out, fmt.Sprintf("%d lease directories under %s", len(ls), filepath.Join(dir, "agent", "leases")))
	}
	return out
}
