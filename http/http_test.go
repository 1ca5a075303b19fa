package http_test

import (
	"encoding/json"
	"io"
	"log/slog"
	nethttp "net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/computetest"
	"github.com/bothyhq/bothy/gcs/gcstest"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/storetest"
	"github.com/bothyhq/bothy/workspace"
)

// maxFile is the file size limit of test servers.
const maxFile = 1 << 20

// env is a running test server with two tenants and a few tokens.
type env struct {
	url     string
	store   bothy.Store
	compute *computetest.Fake // nil unless made by newComputeEnv
	acme    *bhttp.Client     // acme, every scope but admin
	ro      *bhttp.Client     // acme, computers:read and files:read
	other   *bhttp.Client     // tenant other, every scope but admin
	// acmeToken is the secret of acme.
	acmeToken string
}

// opener returns a new, empty metadata store and blob store.
type opener func(t *testing.T) (bothy.Store, bothy.BlobStore)

func openSQLite(t *testing.T) (bothy.Store, bothy.BlobStore) {
	t.Helper()
	b, err := localblob.Open(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	return storetest.OpenSQLite(t), b
}

func openPostgres(t *testing.T) (bothy.Store, bothy.BlobStore) {
	t.Helper()
	return storetest.OpenPostgres(t), gcstest.New(t)
}

func newEnv(t *testing.T, open opener) *env {
	t.Helper()
	return newEnvWith(t, open, false)
}

// newComputeEnv is newEnv with a computetest.Fake as the server's ComputeService.
func newComputeEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, openSQLite, true)
}

func newEnvWith(t *testing.T, open opener, compute bool) *env {
	t.Helper()
	store, blobs := open(t)
	files := workspace.New(store, blobs, workspace.Options{MaxFileSize: maxFile})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := bhttp.Options{MaxFileSize: maxFile, MaxOpsSize: 2 * maxFile, Logger: log}
	e := &env{store: store}
	if compute {
		e.compute = computetest.NewFake(store)
		opts.Compute = e.compute
	}
	srv := httptest.NewServer(bhttp.NewServer(store, files, opts))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	for _, id := range []string{"acme", "other"} {
		key := make([]byte, 32)
		key[0] = id[0]
		if err := store.CreateTenant(t.Context(), &bothy.Tenant{ID: id, HashKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{bothy.ScopeComputersRead, bothy.ScopeComputersWrite, bothy.ScopeFilesRead, bothy.ScopeFilesWrite}
	e.acmeToken = e.token(t, "acme", all...)
	e.acme = bhttp.NewClient(srv.URL, e.acmeToken)
	e.ro = bhttp.NewClient(srv.URL, e.token(t, "acme", bothy.ScopeComputersRead, bothy.ScopeFilesRead))
	e.other = bhttp.NewClient(srv.URL, e.token(t, "other", all...))
	return e
}

func (e *env) token(t *testing.T, tenant string, scopes ...string) string {
	t.Helper()
	_, secret, err := e.store.CreateToken(t.Context(), tenant, "tester", scopes, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// response is a raw HTTP response with its body read.
type response struct {
	status int
	header nethttp.Header
	body   []byte
}

// errCode returns the code of a JSON error body, or "".
func (r *response) errCode() string {
	var e struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal(r.body, &e)
	return e.Error.Code
}

// raw sends a request without the client, to check statuses and headers.
func (e *env) raw(t *testing.T, method, path, token string, body io.Reader, header ...string) *response {
	t.Helper()
	req, err := nethttp.NewRequestWithContext(t.Context(), method, e.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := nethttp.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}
}

// want fails the test unless the response has status and error code (code
// "" for a success).
func (r *response) want(t *testing.T, status int, code string) {
	t.Helper()
	if r.status != status || r.errCode() != code {
		t.Fatalf("status %d code %q, want %d %q; body %s", r.status, r.errCode(), status, code, r.body)
	}
}

func mustCreate(t *testing.T, c *bhttp.Client, req bhttp.CreateComputerRequest) *bothy.Computer {
	t.Helper()
	cm, err := c.CreateComputer(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func TestAPI_SQLite(t *testing.T) { testAPI(t, openSQLite) }

// TestAPI_Postgres runs the same suite on PostgreSQL and (fake) GCS.
func TestAPI_Postgres(t *testing.T) { testAPI(t, openPostgres) }

func testAPI(t *testing.T, open opener) {
	e := newEnv(t, open)
	t.Run("Auth", func(t *testing.T) { testAuth(t, e) })
	t.Run("Computers", func(t *testing.T) { testComputers(t, e) })
	t.Run("Files", func(t *testing.T) { testFiles(t, e) })
	t.Run("FileErrors", func(t *testing.T) { testFileErrors(t, e) })
}

func testAuth(t *testing.T, e *env) {
	t.Run("HealthWithoutToken", func(t *testing.T) {
		e.raw(t, "GET", "/healthz", "", nil).want(t, 200, "")
		e.raw(t, "GET", "/v1/openapi.json", "", nil).want(t, 200, "")
	})
	t.Run("ErrUnauthorized", func(t *testing.T) {
		r := e.raw(t, "GET", "/v1/computers", "", nil)
		r.want(t, 401, bothy.EUNAUTHORIZED)
		if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("WWW-Authenticate = %q", r.header.Get("WWW-Authenticate"))
		}
		e.raw(t, "GET", "/v1/computers", "bothy_not-a-token", nil).want(t, 401, bothy.EUNAUTHORIZED)
		e.raw(t, "GET", "/v1/computers", "", nil, "Authorization", "Basic "+e.acmeToken).want(t, 401, bothy.EUNAUTHORIZED)
		_, err := bhttp.NewClient(e.url, "bothy_bad").ListComputers(t.Context(), bothy.ComputerFilter{})
		storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
	})
	t.Run("ErrUnauthorizedRevoked", func(t *testing.T) {
		tok, secret, err := e.store.CreateToken(t.Context(), "acme", "x", []string{bothy.ScopeAdmin}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		e.raw(t, "GET", "/v1/computers", secret, nil).want(t, 200, "")
		if err := e.store.RevokeToken(t.Context(), "acme", tok.ID); err != nil {
			t.Fatal(err)
		}
		e.raw(t, "GET", "/v1/computers", secret, nil).want(t, 401, bothy.EUNAUTHORIZED)
	})
	t.Run("ErrForbidden", func(t *testing.T) {
		_, err := e.ro.CreateComputer(t.Context(), bhttp.CreateComputerRequest{})
		storetest.WantCode(t, err, bothy.EFORBIDDEN)
		c := mustCreate(t, e.acme, bhttp.CreateComputerRequest{})
		if _, err := e.acme.WriteFile(t.Context(), "", c.ID, "a.txt", strings.NewReader("a"), bothy.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		// Read scopes read; write scopes are needed to write or destroy.
		if _, err := e.ro.FindComputer(t.Context(), c.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.ro.Stat(t.Context(), "", c.ID, "a.txt"); err != nil {
			t.Fatal(err)
		}
		_, err = e.ro.WriteFile(t.Context(), "", c.ID, "b.txt", strings.NewReader("b"), bothy.WriteOptions{})
		storetest.WantCode(t, err, bothy.EFORBIDDEN)
		_, err = e.ro.DestroyComputer(t.Context(), c.ID)
		storetest.WantCode(t, err, bothy.EFORBIDDEN)
		// An admin token holds every scope.
		admin := bhttp.NewClient(e.url, e.token(t, "acme", bothy.ScopeAdmin))
		if _, err := admin.Mkdir(t.Context(), "", c.ID, "d", bothy.MkdirOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("TenantIsolation", func(t *testing.T) {
		c := mustCreate(t, e.acme, bhttp.CreateComputerRequest{Label: "mine"})
		if _, err := e.acme.WriteFile(t.Context(), "", c.ID, "secret.txt", strings.NewReader("s"), bothy.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := e.other.FindComputer(t.Context(), c.ID)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.other.StopComputer(t.Context(), c.ID)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.other.DestroyComputer(t.Context(), c.ID)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.other.ListRevisions(t.Context(), c.ID, 0, 0)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, _, err = e.other.ReadFile(t.Context(), "", c.ID, "secret.txt", 0, -1)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		_, err = e.other.WriteFile(t.Context(), "", c.ID, "x.txt", strings.NewReader("x"), bothy.WriteOptions{})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		if cs, err := e.other.ListComputers(t.Context(), bothy.ComputerFilter{Label: "mine"}); err != nil {
			t.Fatal(err)
		} else if len(cs) != 0 {
			t.Errorf("other tenant lists %d of acme's computers", len(cs))
		}
		if got, err := e.acme.FindComputer(t.Context(), c.ID); err != nil || got.State != bothy.StateCold {
			t.Fatalf("acme's computer after the other tenant's calls: %+v, %v", got, err)
		}
	})
}
