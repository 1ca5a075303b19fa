package http_test

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/computetest"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/workspace"
)

// TestProfiles_Authority: a token may create computers with, and run
// commands on, only the profiles its authority includes: its profile:NAME
// scopes, or the default profile when it has none; admin has them all.
// A profile the server does not serve is 400 whatever the token.
func TestProfiles_Authority(t *testing.T) {
	store, blobs := openSQLite(t)
	files := workspace.New(store, blobs, workspace.Options{})
	srv := httptest.NewServer(bhttp.NewServer(store, files, bhttp.Options{
		Profiles: []string{"standard", "strong"}, Compute: computetest.NewFake(store),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	t.Cleanup(srv.Close)
	if err := store.CreateTenant(t.Context(), &bothy.Tenant{ID: "acme", HashKey: make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	client := func(scopes ...string) *bhttp.Client {
		_, secret, err := store.CreateToken(t.Context(), "acme", "o", scopes, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return bhttp.NewClient(srv.URL, secret)
	}
	rw := []string{bothy.ScopeComputersRead, bothy.ScopeComputersWrite}
	plain := client(rw...)
	strongOnly := client(append(rw, "profile:strong")...)
	admin := client(bothy.ScopeAdmin)

	for _, tc := range []struct {
		name    string
		c       *bhttp.Client
		profile string
		want    string // "" for success
	}{
		{"plain/standard", plain, "standard", ""},
		{"plain/strong", plain, "strong", bothy.EFORBIDDEN},
		{"strongOnly/strong", strongOnly, "strong", ""},
		{"strongOnly/standard", strongOnly, "standard", bothy.EFORBIDDEN},
		{"admin/strong", admin, "strong", ""},
		{"admin/gpu", admin, "gpu", bothy.EINVALID},
		{"plain/gpu", plain, "gpu", bothy.EINVALID},
	} {
		_, err := tc.c.CreateComputer(t.Context(), bhttp.CreateComputerRequest{Profile: tc.profile})
		if got := bothy.ErrorCode(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Running on a computer needs its profile too.
	strong, err := admin.CreateComputer(t.Context(), bhttp.CreateComputerRequest{Profile: "strong"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.RunCommand(t.Context(), strong.ID, bothy.RunRequest{Argv: []string{"true"}}); bothy.ErrorCode(err) != bothy.EFORBIDDEN {
		t.Errorf("run on a strong computer with a standard-only token: %v", err)
	}
	if _, err := strongOnly.RunCommand(t.Context(), strong.ID, bothy.RunRequest{Argv: []string{"true"}}); err != nil {
		t.Errorf("run on a strong computer with profile:strong: %v", err)
	}
	// Profile scopes are validated like the others.
	if _, _, err := store.CreateToken(t.Context(), "acme", "o", []string{"profile:"}, time.Time{}); bothy.ErrorCode(err) != bothy.EINVALID {
		t.Errorf("an empty profile scope: %v", err)
	}
}
