package http_test

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/computetest"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/filetest"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/runtimetest"
	"github.com/bothyhq/bothy/workspace"
)

// liveEnv is an API server over a real controller and workspace, as
// package server wires them, with an agent that serves the computers the
// controller starts, and clients of two tenants.
type liveEnv struct {
	acme, other *bhttp.Client
	agent       *runtimetest.Agent
}

// maxBatch is the most operations of a batch on a live server.
const maxBatch = 8

func newLiveEnv(t *testing.T, open opener) *liveEnv {
	t.Helper()
	store, blobs := open(t)
	const agentToken = "agent-token-for-tests"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctl := control.New(store, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken, Logger: log})
	files := ctl.Files(workspace.New(store, blobs, workspace.Options{MaxFileSize: maxFile, MaxBatch: maxBatch}))
	srv := httptest.NewServer(bhttp.NewServer(store, files, bhttp.Options{MaxFileSize: maxFile, Compute: ctl, Receipts: ctl, Logger: log}))
	t.Cleanup(srv.Close)
	e := &liveEnv{agent: runtimetest.StartAgent(t, ctl, agentToken, "a", blobs)}
	scopes := []string{bothy.ScopeComputersRead, bothy.ScopeComputersWrite, bothy.ScopeFilesRead, bothy.ScopeFilesWrite}
	for _, c := range []struct {
		tenant string
		client **bhttp.Client
	}{{"acme", &e.acme}, {"other", &e.other}} {
		tn, err := bothy.NewTenant(c.tenant, c.tenant)
		if err != nil {
			t.Fatal(err)
		} else if err := store.CreateTenant(t.Context(), tn); err != nil {
			t.Fatal(err)
		}
		_, secret, err := store.CreateToken(t.Context(), c.tenant, "tester", scopes, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		*c.client = bhttp.NewClient(srv.URL, secret)
	}
	return e
}

// newComputer creates a cold computer of acme.
func (e *liveEnv) newComputer(t *testing.T) string {
	t.Helper()
	return mustCreate(t, e.acme, bhttp.CreateComputerRequest{}).ID
}

func TestClient_FileService(t *testing.T) {
	for name, open := range map[string]opener{"SQLite": openSQLite, "PostgreSQL": openPostgres} {
		t.Run(name, func(t *testing.T) {
			filetest.TestFileService(t, func(t *testing.T) *filetest.Env {
				e := newLiveEnv(t, open)
				compute := bhttp.ComputeClient{Client: e.acme}
				return &filetest.Env{
					Files: e.acme, TenantID: "acme", Other: e.other, OtherTenantID: "other",
					NewComputer: e.newComputer, MaxFileSize: maxFile, MaxBatch: maxBatch,
					Activate: func(t *testing.T, id string) { e.agent.Activate(t, compute, "acme", id) },
				}
			})
		})
	}
}

func TestComputeClient(t *testing.T) {
	for name, open := range map[string]opener{"SQLite": openSQLite, "PostgreSQL": openPostgres} {
		t.Run(name, func(t *testing.T) {
			computetest.TestComputeService(t, func(t *testing.T) *computetest.Env {
				e := newLiveEnv(t, open)
				return &computetest.Env{
					Compute: bhttp.ComputeClient{Client: e.acme}, TenantID: "acme",
					Other: bhttp.ComputeClient{Client: e.other}, OtherTenantID: "other",
					NewComputer: e.newComputer, Runtime: e.agent,
				}
			})
		})
	}
}
