package runtime_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/postgres"
	"github.com/bothyhq/bothy/postgres/pgtest"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/runtimetest"
	"github.com/bothyhq/bothy/sqlite"
)

// TestClient runs the runtime.Control suite through the HTTP client and
// handler, against the controller.
func TestClient(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) bothy.Store{
		"SQLite": func(t *testing.T) bothy.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "bothy.db"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"PostgreSQL": func(t *testing.T) bothy.Store {
			s, err := postgres.Open(context.Background(), pgtest.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			runtimetest.TestControl(t, func(t *testing.T) *runtimetest.Env {
				s := open(t)
				t.Cleanup(func() { s.Close() })
				const token = "agent-token-for-tests"
				log := slog.New(slog.NewTextHandler(io.Discard, nil))
				c := control.New(s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: token, Logger: log})
				srv := httptest.NewServer(runtime.Handler(c, log))
				t.Cleanup(srv.Close)
				return &runtimetest.Env{Control: runtime.NewClient(srv.URL), AgentToken: token, Compute: c, Store: s, Profile: "standard"}
			})
		})
	}
}
