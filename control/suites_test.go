package control_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/computetest"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/filetest"
	"github.com/bothyhq/bothy/gcs/gcstest"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/runtimetest"
	"github.com/bothyhq/bothy/storetest"
	"github.com/bothyhq/bothy/workspace"
)

// backends opens an empty metadata store and blob store on each engine.
var backends = []struct {
	name string
	open func(t *testing.T) (bothy.Store, bothy.BlobStore)
}{
	{"SQLite", func(t *testing.T) (bothy.Store, bothy.BlobStore) {
		blobs, err := localblob.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return storetest.OpenSQLite(t), blobs
	}},
	{"PostgreSQL", func(t *testing.T) (bothy.Store, bothy.BlobStore) {
		return storetest.OpenPostgres(t), gcstest.New(t)
	}},
}

// newController is a controller over s whose profile "standard" is
// served by the provider "fake".
func newController(s bothy.Store) *control.Controller {
	return control.New(s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: agentToken,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func TestControl(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			runtimetest.TestControl(t, func(t *testing.T) *runtimetest.Env {
				s, _ := b.open(t)
				c := newController(s)
				return &runtimetest.Env{Control: c, AgentToken: agentToken, Compute: c, Store: s, Profile: "standard"}
			})
		})
	}
}

func TestFiles(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			filetest.TestFileService(t, func(t *testing.T) *filetest.Env {
				s, blobs := b.open(t)
				return newFilesEnv(t, s, blobs)
			})
		})
	}
}

// newFilesEnv is the controller's files over s and blobs, with an agent
// that serves the computers it starts.
func newFilesEnv(t *testing.T, s bothy.Store, blobs bothy.BlobStore) *filetest.Env {
	t.Helper()
	c := newController(s)
	const maxFile, maxBatch = 1 << 16, 8
	files := c.Files(workspace.New(s, blobs, workspace.Options{MaxFileSize: maxFile, MaxBatch: maxBatch}))
	createTenants(t, s, "t1", "t2")
	agent := runtimetest.StartAgent(t, c, agentToken, "a", blobs)
	return &filetest.Env{
		Files: files, TenantID: "t1", Other: files, OtherTenantID: "t2", MaxFileSize: maxFile, MaxBatch: maxBatch,
		NewComputer: computers(s, "t1"),
		Activate:    func(t *testing.T, id string) { agent.Activate(t, c, "t1", id) },
	}
}

func TestCompute(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			computetest.TestComputeService(t, func(t *testing.T) *computetest.Env {
				s, blobs := b.open(t)
				c := newController(s)
				createTenants(t, s, "t1", "t2")
				return &computetest.Env{
					Compute: c, TenantID: "t1", Other: c, OtherTenantID: "t2",
					NewComputer: computers(s, "t1"), Runtime: runtimetest.StartAgent(t, c, agentToken, "a", blobs),
				}
			})
		})
	}
}

// createTenants stores a tenant of each id.
func createTenants(t *testing.T, s bothy.Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		tn, err := bothy.NewTenant(id, id)
		if err != nil {
			t.Fatal(err)
		} else if err := s.CreateTenant(t.Context(), tn); err != nil {
			t.Fatal(err)
		}
	}
}

// computers returns a function that stores a new cold computer of the
// tenant and returns its id.
func computers(s bothy.Store, tenantID string) func(t *testing.T) string {
	n := 0
	return func(t *testing.T) string {
		t.Helper()
		n++
		comp := &bothy.Computer{ID: fmt.Sprintf("cmp%d", n), TenantID: tenantID, Owner: "o", Profile: "standard", State: bothy.StateCold}
		if err := s.CreateComputer(t.Context(), comp); err != nil {
			t.Fatal(err)
		}
		return comp.ID
	}
}
