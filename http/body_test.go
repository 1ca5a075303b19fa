package http_test

import (
	"fmt"
	"io"
	"log/slog"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/workspace"
)

// countingBody is a request body that counts the bytes read from it, and
// closes started at its first read.
type countingBody struct {
	r       io.Reader
	read    atomic.Int64
	started chan struct{}
	once    atomic.Bool
}

func newBody(r io.Reader) *countingBody { return &countingBody{r: r, started: make(chan struct{})} }

func (b *countingBody) Read(p []byte) (int, error) {
	if b.once.CompareAndSwap(false, true) {
		close(b.started)
	}
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return nil }

// inproc is a server called in process, without sockets, so that what a
// body counts is what the server read.
type inproc struct {
	h        nethttp.Handler
	token    string
	computer string
}

func newInproc(t *testing.T, opts bhttp.Options) *inproc {
	t.Helper()
	store, blobs := openSQLite(t)
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s := bhttp.NewServer(store, workspace.New(store, blobs, workspace.Options{}), opts)
	if err := store.CreateTenant(t.Context(), &bothy.Tenant{ID: "acme", HashKey: make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	_, secret, err := store.CreateToken(t.Context(), "acme", "tester", []string{bothy.ScopeFilesRead, bothy.ScopeFilesWrite}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	c := &bothy.Computer{ID: "cmp_body", TenantID: "acme", Owner: "tester", Profile: "standard", State: bothy.StateCold}
	if err := store.CreateComputer(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	return &inproc{h: s, token: secret, computer: c.ID}
}

// post sends body (length -1: unknown) to the computer's route.
func (e *inproc) post(route string, body io.ReadCloser, length int64) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/v1/computers/"+e.computer+route, nil)
	req.Body, req.ContentLength = body, length
	req.Header.Set("Authorization", "Bearer "+e.token)
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	return w
}

func errCode(w *httptest.ResponseRecorder) string {
	return (&response{body: w.Body.Bytes()}).errCode()
}

// opsBody is a batch of n mkdir operations.
func opsBody(n int) (string, int) {
	var b strings.Builder
	b.WriteString(`{"ops":[`)
	first := 0
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"op":"mkdir","path":"d%07d"}`, i)
		if i == bhttp.DefaultMaxOps {
			first = b.Len() // the bytes up to the first operation over the cap
		}
	}
	b.WriteString("]}")
	return b.String(), first
}

// A batch of more operations than the cap is refused once the first
// operation over it is decoded, not after the whole batch.
func TestServer_OpsCapBeforeDecode(t *testing.T) {
	e := newInproc(t, bhttp.Options{})
	body, first := opsBody(200_000) // 6 MiB, under the 64 MiB body cap
	for _, length := range []int64{int64(len(body)), -1} {
		b := newBody(strings.NewReader(body))
		w := e.post("/fs/ops", b, length)
		const slack = 64 << 10
		if w.Code != nethttp.StatusRequestEntityTooLarge || errCode(w) != bothy.ETOOLARGE || b.read.Load() > int64(first+slack) {
			t.Fatalf("length %d: status %d %q after reading %d of %d bytes; want 413 too_large after at most %d",
				length, w.Code, errCode(w), b.read.Load(), len(body), first+slack)
		}
	}
	// A batch at the cap is still applied.
	ok, _ := opsBody(bhttp.DefaultMaxOps)
	if w := e.post("/fs/ops", newBody(strings.NewReader(ok)), int64(len(ok))); w.Code != nethttp.StatusOK {
		t.Fatalf("a batch of %d: status %d %s", bhttp.DefaultMaxOps, w.Code, w.Body)
	}
	// The batch is decoded as before: unknown fields, a missing array and
	// trailing data are refused.
	for _, bad := range []string{`{"ops":[{"op":"mkdir","path":"x","bogus":1}]}`, `{"opz":[]}`, `{"ops":{}}`, `{"ops":[]} {}`, `[]`, ``} {
		if w := e.post("/fs/ops", newBody(strings.NewReader(bad)), int64(len(bad))); w.Code != nethttp.StatusBadRequest {
			t.Errorf("body %q: status %d %s, want 400", bad, w.Code, w.Body)
		}
	}
}

// A body over its route's cap is 413 after at most the cap and a little more.
func TestServer_BodyCap(t *testing.T) {
	e := newInproc(t, bhttp.Options{MaxJSONSize: 1 << 20, MaxOpsSize: 2 << 20})
	const slack = 64 << 10
	for _, tc := range []struct {
		route, body string
		cap         int64
	}{
		{"/fs/mkdir", `{"path":"` + strings.Repeat("x", 3<<20) + `"}`, 1 << 20},
		{"/fs/ops", `{"ops":[{"op":"write","path":"f","data":"` + strings.Repeat("A", 6<<20) + `"}]}`, 2 << 20},
	} {
		body := tc.body
		for _, length := range []int64{int64(len(body)), -1} {
			b := newBody(strings.NewReader(body))
			w := e.post(tc.route, b, length)
			if w.Code != nethttp.StatusRequestEntityTooLarge || b.read.Load() > tc.cap+slack {
				t.Errorf("%s, length %d: status %d after reading %d bytes; want 413 after at most %d", tc.route, length, w.Code, b.read.Load(), tc.cap+slack)
			}
		}
	}
}

// Bodies being read take bytes of the server's budget: one that finds too
// few left is 503 unavailable without being read, and the bytes come back
// when the body that held them is read.
func TestServer_BodyBudget(t *testing.T) {
	budget := bhttp.NewBudget(1 << 20)
	e := newInproc(t, bhttp.Options{Budget: budget})
	big := `{"path":"` + strings.Repeat("x", 700<<10) + `"}`
	pr, pw := io.Pipe()
	held := newBody(pr)
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- e.post("/fs/mkdir", held, int64(len(big))) }()
	select {
	case <-held.started: // the server holds its bytes before it reads
	case <-time.After(10 * time.Second):
		t.Fatal("the first body was never read")
	}
	second := newBody(strings.NewReader(big))
	w := e.post("/fs/mkdir", second, int64(len(big)))
	if w.Code != nethttp.StatusServiceUnavailable || errCode(w) != bothy.EUNAVAILABLE || second.read.Load() != 0 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("second body over the budget: status %d %q, Retry-After %q, after reading %d bytes; want 503 unavailable, Retry-After, none read",
			w.Code, errCode(w), w.Header().Get("Retry-After"), second.read.Load())
	}
	// A body of unknown length takes the route's cap, here more than is left.
	if w := e.post("/fs/mkdir", newBody(strings.NewReader(`{"path":"a"}`)), -1); w.Code != nethttp.StatusServiceUnavailable {
		t.Fatalf("a chunked body while the budget is held: status %d %s, want 503", w.Code, w.Body)
	}
	go func() { io.WriteString(pw, big); pw.Close() }()
	if w := <-done; w.Code == nethttp.StatusServiceUnavailable {
		t.Fatalf("the first body: status %d %s", w.Code, w.Body)
	}
	if w := e.post("/fs/mkdir", newBody(strings.NewReader(big)), int64(len(big))); w.Code == nethttp.StatusServiceUnavailable {
		t.Fatalf("a body after the first was read: status %d %s; want its bytes back", w.Code, w.Body)
	}
}
