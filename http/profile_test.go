package http_test

import (
	"cmp"
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
	store, client := authorityServer(t, "standard", "strong")
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

// TestAuthority_EgressAndBudget: the egress mode of a new computer must be
// within the token's ceiling; the computer keeps its creator's authority,
// whose budget caps every command's wall time and refuses commands once
// its CPU seconds are spent.
func TestAuthority_EgressAndBudget(t *testing.T) {
	store, client := authorityServer(t)
	rw := []string{bothy.ScopeComputersRead, bothy.ScopeComputersWrite}
	plain := client(rw...)
	allow := client(append(rw, "egress:allowlist", "budget:wall-seconds=5", "budget:cpu-seconds=2")...)
	all := client(append(rw, "egress:all")...)
	allowlist := bothy.EgressPolicy{Mode: bothy.EgressAllowlist, Allow: []string{"origin.test:443"}}
	for _, tc := range []struct {
		name   string
		c      *bhttp.Client
		egress bothy.EgressPolicy
		want   string
	}{
		{"plain/none", plain, bothy.EgressPolicy{}, ""},
		{"plain/allowlist", plain, allowlist, bothy.EFORBIDDEN},
		{"plain/all", plain, bothy.EgressPolicy{Mode: bothy.EgressAll}, bothy.EFORBIDDEN},
		{"allow/allowlist", allow, allowlist, ""},
		{"allow/all", allow, bothy.EgressPolicy{Mode: bothy.EgressAll}, bothy.EFORBIDDEN},
		{"all/all", all, bothy.EgressPolicy{Mode: bothy.EgressAll}, ""},
		{"all/bad pattern", all, bothy.EgressPolicy{Mode: bothy.EgressAllowlist, Allow: []string{"origin.test"}}, bothy.EINVALID},
	} {
		c, err := tc.c.CreateComputer(t.Context(), bhttp.CreateComputerRequest{Egress: tc.egress})
		if got := bothy.ErrorCode(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		} else if err == nil && (c.Egress.Mode != cmp.Or(tc.egress.Mode, bothy.EgressNone) || c.Authority == nil) {
			t.Errorf("%s: created with egress %+v authority %v", tc.name, c.Egress, c.Authority)
		}
	}

	// The budget of the creator holds for every command on the computer,
	// whoever runs it.
	comp, err := allow.CreateComputer(t.Context(), bhttp.CreateComputerRequest{Egress: allowlist})
	if err != nil {
		t.Fatal(err)
	}
	if comp.Authority.Budget.WallSeconds != 5 || comp.Authority.Egress != bothy.EgressAllowlist {
		t.Fatalf("authority snapshot %+v", comp.Authority)
	}
	// A caller whose egress ceiling is below the computer's cannot run
	// on it: it would borrow the computer's network reach.
	if _, err := plain.RunCommand(t.Context(), comp.ID, bothy.RunRequest{Argv: []string{"true"}}); bothy.ErrorCode(err) != bothy.EFORBIDDEN {
		t.Errorf("run on an allowlist computer with an egress-none token: %v, want forbidden", err)
	}
	cmd, err := all.RunCommand(t.Context(), comp.ID, bothy.RunRequest{Argv: []string{"true"}, TimeoutMS: 60000})
	if err != nil {
		t.Fatal(err)
	} else if cmd.TimeoutMS != 5000 {
		t.Errorf("timeout %d ms, want the wall budget's 5000", cmd.TimeoutMS)
	}
	ctx := t.Context()
	lease, err := store.ActiveLease(ctx, "acme", comp.ID)
	if err != nil {
		t.Fatal(err)
	}
	spent := bothy.Usage{CPUMicros: 2_000_000}
	if _, err := store.TransitionCommand(ctx, "acme", cmd.ID, []string{bothy.CommandRunning}, bothy.CommandCompleted,
		bothy.CommandUpdate{Generation: lease.Generation, ExitCode: new(int), Usage: &spent}); err != nil {
		t.Fatal(err)
	}
	if _, err := all.RunCommand(t.Context(), comp.ID, bothy.RunRequest{Argv: []string{"true"}}); bothy.ErrorCode(err) != bothy.EFORBIDDEN {
		t.Errorf("run after the CPU budget was spent: %v, want %q", err, bothy.EFORBIDDEN)
	}
	// Budget and egress scopes are validated like the others.
	for _, bad := range []string{"egress:some", "budget:cpu-seconds=0", "budget:gpus=1", "secret:../x"} {
		if _, _, err := store.CreateToken(ctx, "acme", "o", []string{bad}, time.Time{}); bothy.ErrorCode(err) != bothy.EINVALID {
			t.Errorf("scope %q: %v", bad, err)
		}
	}
}

// authorityServer serves the API over SQLite and a fake compute service
// with the given profiles (none: the default), for tenant acme, and
// returns the store and a maker of clients holding tokens of given scopes.
func authorityServer(t *testing.T, profiles ...string) (bothy.Store, func(scopes ...string) *bhttp.Client) {
	t.Helper()
	store, blobs := openSQLite(t)
	files := workspace.New(store, blobs, workspace.Options{})
	srv := httptest.NewServer(bhttp.NewServer(store, files, bhttp.Options{
		Profiles: profiles, Compute: computetest.NewFake(store),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	t.Cleanup(srv.Close)
	if err := store.CreateTenant(t.Context(), &bothy.Tenant{ID: "acme", HashKey: make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	return store, func(scopes ...string) *bhttp.Client {
		_, secret, err := store.CreateToken(t.Context(), "acme", "o", scopes, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return bhttp.NewClient(srv.URL, secret)
	}
}
