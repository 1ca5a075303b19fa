package runtime_test

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/runtimetest"
	"github.com/bothyhq/bothy/storetest"
)

// TestClient runs the runtime.Control suite through the HTTP client and
// handler, against the controller.
func TestClient(t *testing.T) {
	for _, engine := range storetest.Engines {
		t.Run(engine.Name, func(t *testing.T) {
			runtimetest.TestControl(t, func(t *testing.T) *runtimetest.Env {
				s := engine.Open(t)
				const token = "agent-token-for-tests"
				log := slog.New(slog.NewTextHandler(io.Discard, nil))
				c := control.New(s, control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: token, Logger: log})
				srv := httptest.NewServer(runtime.Handler(c, log, nil))
				t.Cleanup(srv.Close)
				return &runtimetest.Env{Control: runtime.NewClient(srv.URL), AgentToken: token, Compute: c, Store: s, Profile: "standard"}
			})
		})
	}
}
