package runtime_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/runtime"
	"github.com/bothyhq/bothy/storetest"
)

// countingBody is a request body that counts the bytes read from it.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return nil }

func newHandler(t *testing.T) (http.Handler, *control.Controller) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := control.New(storetest.OpenSQLite(t), control.Config{Profiles: map[string]string{"standard": "fake"}, AgentToken: "agent-token-for-tests", Signer: testSigner, Logger: log})
	return runtime.Handler(c, log, nil), c
}

// serve sends a request with body to h in process (no socket buffers in
// between), so the body's count is what the handler read.
func serve(h http.Handler, path, token string, body *countingBody, length int64) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", path, nil)
	req.Body, req.ContentLength = body, length
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// A request with a bad credential is refused before its body is read, so
// that an unauthenticated caller costs no memory for it.
func TestHandler_AuthBeforeBody(t *testing.T) {
	h, _ := newHandler(t)
	body := `{"events":[{"data":"` + strings.Repeat("x", 4<<20) + `"}]}`
	for _, tc := range []struct{ path, token string }{
		{runtime.PathPrefix + "poll", "not-the-agent-token"},
		{runtime.PathPrefix + "lease/ready", "blc_bad.bad"},
		{runtime.PathPrefix + "lease/commit", ""},
		{runtime.PathPrefix + "commands/c1/events", "blc_bad.bad"},
		{runtime.PathPrefix + "commands/c1/report", "agent-token-for-tests"},
	} {
		b := &countingBody{r: strings.NewReader(body)}
		w := serve(h, tc.path, tc.token, b, int64(len(body)))
		if w.Code != http.StatusUnauthorized || b.read.Load() != 0 {
			t.Errorf("%s with token %q: status %d after reading %d body bytes; want 401 after none", tc.path, tc.token, w.Code, b.read.Load())
		}
	}
}

// A body over its route's cap is 413 after reading at most the cap and a
// little more; the small messages have a smaller cap than events.
func TestHandler_BodyCapByRoute(t *testing.T) {
	h, _ := newHandler(t)
	const slack = 64 << 10
	for _, tc := range []struct {
		path string
		cap  int64
	}{
		{runtime.PathPrefix + "poll", runtime.MaxBody},
		{runtime.PathPrefix + "lease/ready", runtime.MaxSmallBody},
	} {
		for _, length := range []int64{-1, 2 * tc.cap} { // chunked, and a stated length
			big := `{"agent_id":"` + strings.Repeat("x", int(2*tc.cap)) + `"}`
			b := &countingBody{r: strings.NewReader(big)}
			tok := "agent-token-for-tests"
			if !strings.HasSuffix(tc.path, "poll") {
				tok = signed(t)
			}
			w := serve(h, tc.path, tok, b, length)
			if w.Code != http.StatusRequestEntityTooLarge || b.read.Load() > tc.cap+slack {
				t.Errorf("%s, length %d: status %d after reading %d bytes; want 413 after at most %d", tc.path, length, w.Code, b.read.Load(), tc.cap+slack)
			}
		}
	}
}

// signed returns a lease credential that passes the signature check of
// newHandler's controller (its lease is not known).
func signed(t *testing.T) string {
	t.Helper()
	return testSigner.Sign(runtime.Claims{TenantID: "t", ComputerID: "c", LeaseID: "l", Generation: 1, Expires: time.Now().Add(time.Hour)})
}

var testSigner = runtime.NewSigner(bytes.Repeat([]byte{7}, 32))
