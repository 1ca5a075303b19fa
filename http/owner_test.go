package http_test

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/receipt"
	"github.com/bothyhq/bothy/storetest"
)

// ownerRequests is, for every route that names a computer, a command or a
// lease, a request its owner may make: a query (after "?") or a JSON body.
// A route missing here fails TestOwners, so that a new route cannot skip
// the owner rule's test.
var ownerRequests = map[string]string{
	"GET /v1/computers/{id}":                 "",
	"POST /v1/computers/{id}/stop":           "{}",
	"DELETE /v1/computers/{id}":              "",
	"GET /v1/computers/{id}/revisions":       "",
	"POST /v1/computers/{id}/checkpoint":     "{}",
	"POST /v1/computers/{id}/commands":       `{"argv":["true"]}`,
	"GET /v1/computers/{id}/commands":        "",
	"GET /v1/commands/{id}":                  "",
	"GET /v1/commands/{id}/events":           "",
	"POST /v1/commands/{id}/cancel":          "{}",
	"GET /v1/commands/{id}/receipt":          "",
	"GET /v1/leases/{id}/receipt":            "",
	"GET /v1/computers/{id}/files/{path...}": "",
	"PUT /v1/computers/{id}/files/{path...}": "new",
	"GET /v1/computers/{id}/fs/list":         "?path=.",
	"GET /v1/computers/{id}/fs/stat":         "?path=a.txt",
	"GET /v1/computers/{id}/fs/lstat":        "?path=a.txt",
	"GET /v1/computers/{id}/fs/readlink":     "?path=link",
	"GET /v1/computers/{id}/fs/glob":         "?pattern=*",
	"POST /v1/computers/{id}/fs/grep":        `{"pattern":"a"}`,
	"POST /v1/computers/{id}/fs/mkdir":       `{"path":"d"}`,
	"POST /v1/computers/{id}/fs/rm":          `{"path":"gone","force":true}`,
	"POST /v1/computers/{id}/fs/rename":      `{"from":"r1","to":"r2"}`,
	"POST /v1/computers/{id}/fs/symlink":     `{"target":"a.txt","path":"s2"}`,
	"POST /v1/computers/{id}/fs/chmod":       `{"path":"a.txt","mode":420}`,
	"POST /v1/computers/{id}/fs/ops":         `{"ops":[{"op":"mkdir","path":"o"}]}`,
}

// owned is a computer with a file, a symlink, a finished command with
// output, the command's lease, and stored receipts of both.
type owned struct{ computer, command, lease string }

// newOwned makes an owned computer through c, a token of its owner.
func (e *env) newOwned(t *testing.T, c *bhttp.Client, conversation string) *owned {
	t.Helper()
	ctx := t.Context()
	cm := mustCreate(t, c, bhttp.CreateComputerRequest{Label: "owned", ConversationID: conversation})
	for _, name := range []string{"a.txt", "r1"} {
		if _, err := c.WriteFile(ctx, "", cm.ID, name, strings.NewReader("a\n"), bothy.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Symlink(ctx, "", cm.ID, "a.txt", "link"); err != nil {
		t.Fatal(err)
	}
	cmd := mustRun(t, c, cm.ID, bothy.RunRequest{})
	e.compute.Emit(t, "acme", cmd.ID, out(bothy.EventStdout, "private"))
	cmd = e.compute.Finish(t, "acme", cmd.ID, bothy.CommandCompleted, 0)
	// Cold again, so that its files can be changed through the store.
	if _, err := c.StopComputer(ctx, cm.ID); err != nil {
		t.Fatal(err)
	}
	s := receipt.NewSigner(nil)
	for _, b := range []*bothy.ReceiptBody{
		{ID: "rct_c" + cmd.ID, Kind: bothy.ReceiptCommand, CommandID: cmd.ID},
		{ID: "rct_l" + cmd.ID, Kind: bothy.ReceiptLease},
	} {
		b.TenantID, b.ComputerID, b.LeaseID, b.IssuedAt = "acme", cm.ID, cmd.LeaseID, time.Now().UTC()
		rc, err := s.Sign(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.CreateReceipt(ctx, rc); err != nil {
			t.Fatal(err)
		}
	}
	return &owned{computer: cm.ID, command: cmd.ID, lease: cmd.LeaseID}
}

// ownerRoutes returns the routes that name a computer, command or lease,
// destroy last, so that a walk by the owner acts on a live computer.
func ownerRoutes(t *testing.T) []bhttp.Route {
	t.Helper()
	var rts []bhttp.Route
	for _, rt := range bhttp.NewServer(nil, nil, bhttp.Options{}).Routes() {
		if !strings.Contains(rt.Pattern, "{id}") {
			continue
		} else if _, ok := ownerRequests[rt.Method+" "+rt.Pattern]; !ok {
			t.Errorf("route %s %s names a resource but TestOwners has no request for it", rt.Method, rt.Pattern)
			continue
		}
		rts = append(rts, rt)
	}
	// Destroy last: a stable sort that moves DELETE after the rest.
	slices.SortStableFunc(rts, func(a, b bhttp.Route) int { return boolInt(a.Method == "DELETE") - boolInt(b.Method == "DELETE") })
	return rts
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// call sends rt's request on o with token.
func (e *env) call(t *testing.T, rt bhttp.Route, o *owned, token string) *response {
	t.Helper()
	p := rt.Pattern
	switch {
	case strings.HasPrefix(p, "/v1/computers/{id}"):
		p = strings.Replace(p, "{id}", o.computer, 1)
	case strings.HasPrefix(p, "/v1/commands/{id}"):
		p = strings.Replace(p, "{id}", o.command, 1)
	case strings.HasPrefix(p, "/v1/leases/{id}"):
		p = strings.Replace(p, "{id}", o.lease, 1)
	default:
		t.Fatalf("route %s: which resource does {id} name?", p)
	}
	p = strings.Replace(p, "{path...}", "a.txt", 1)
	req := ownerRequests[rt.Method+" "+rt.Pattern]
	var body io.Reader
	if strings.HasPrefix(req, "?") {
		p += req
	} else if req != "" {
		body = strings.NewReader(req)
	}
	return e.raw(t, rt.Method, p, token, body)
}

// TestOwners_SQLite: within one tenant, a token acts on its owner's
// computers only. Every route that names a computer, a command or a lease
// answers not_found to another owner's token, exactly as to another
// tenant's, and a computers:any token acts on every owner's.
func TestOwners_SQLite(t *testing.T) { testOwners(t, openSQLite) }

// TestOwners_Postgres runs the same walk on PostgreSQL and (fake) GCS.
func TestOwners_Postgres(t *testing.T) { testOwners(t, openPostgres) }

func testOwners(t *testing.T, open opener) {
	e := newEnvWith(t, open, true)
	all := []string{bothy.ScopeComputersRead, bothy.ScopeComputersWrite, bothy.ScopeFilesRead, bothy.ScopeFilesWrite}
	alice, bob := e.ownerToken(t, "alice", all...), e.ownerToken(t, "bob", all...)
	ac, bc := bhttp.NewClient(e.url, alice), bhttp.NewClient(e.url, bob)
	rts := ownerRoutes(t)

	t.Run("OtherOwner", func(t *testing.T) {
		o := e.newOwned(t, ac, "")
		for _, rt := range rts {
			r := e.call(t, rt, o, bob)
			if r.status != 404 || r.errCode() != bothy.ENOTFOUND {
				t.Errorf("%s %s with another owner's token: status %d code %q, want 404 not_found; body %.200s", rt.Method, rt.Pattern, r.status, r.errCode(), r.body)
			}
		}
		cs, err := bc.ListComputers(t.Context(), bothy.ComputerFilter{Label: "owned"})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.ID == o.computer {
				t.Errorf("another owner lists %s", c.ID)
			}
		}
		got, err := ac.FindComputer(t.Context(), o.computer)
		if err != nil || got.State == bothy.StateDestroyed {
			t.Fatalf("the owner's computer after another owner's calls: %+v, %v", got, err)
		}
		if _, err := ac.Stat(t.Context(), "", o.computer, "d"); bothy.ErrorCode(err) != bothy.ENOTFOUND {
			t.Errorf("another owner's mkdir made d: stat %v", err)
		}
	})
	t.Run("Owner", func(t *testing.T) {
		o := e.newOwned(t, ac, "")
		for _, rt := range rts {
			if r := e.call(t, rt, o, alice); r.status/100 != 2 {
				t.Errorf("%s %s with its owner's token: status %d code %q; body %.200s", rt.Method, rt.Pattern, r.status, r.errCode(), r.body)
			}
			e.settle(t, ac, o)
		}
	})
	t.Run("ComputersAny", func(t *testing.T) {
		anyToken := e.ownerToken(t, "ops", append(all, "computers:any")...)
		anyc := bhttp.NewClient(e.url, anyToken)
		mine := mustCreate(t, bc, bhttp.CreateComputerRequest{Label: "any"})
		o := e.newOwned(t, ac, "")
		for _, rt := range rts {
			if r := e.call(t, rt, o, anyToken); r.status/100 != 2 {
				t.Errorf("%s %s with a computers:any token: status %d code %q; body %.200s", rt.Method, rt.Pattern, r.status, r.errCode(), r.body)
			}
			e.settle(t, ac, o)
		}
		cs, err := anyc.ListComputers(t.Context(), bothy.ComputerFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(cs, func(c *bothy.Computer) bool { return c.ID == o.computer }) ||
			!slices.ContainsFunc(cs, func(c *bothy.Computer) bool { return c.ID == mine.ID }) {
			t.Errorf("a computers:any token lists %d computers, not both owners'", len(cs))
		}
		if _, err := anyc.DestroyComputer(t.Context(), mine.ID); err != nil {
			t.Errorf("a computers:any token destroys bob's computer: %v", err)
		}
		// An admin token holds computers:any.
		admin := bhttp.NewClient(e.url, e.ownerToken(t, "root", bothy.ScopeAdmin))
		if _, err := admin.FindComputer(t.Context(), o.computer); err != nil {
			t.Errorf("an admin token finds alice's computer: %v", err)
		}
	})
	t.Run("List", func(t *testing.T) {
		a := mustCreate(t, ac, bhttp.CreateComputerRequest{Label: "list"})
		b := mustCreate(t, bc, bhttp.CreateComputerRequest{Label: "list"})
		for _, tc := range []struct {
			c    *bhttp.Client
			want string
		}{{ac, a.ID}, {bc, b.ID}} {
			cs, err := tc.c.ListComputers(t.Context(), bothy.ComputerFilter{Label: "list"})
			if err != nil {
				t.Fatal(err)
			} else if len(cs) != 1 || cs[0].ID != tc.want {
				t.Errorf("list by an owner: %d computers, want only %s", len(cs), tc.want)
			}
		}
		if a.Owner != "alice" || b.Owner != "bob" {
			t.Errorf("owners %q and %q, want alice and bob", a.Owner, b.Owner)
		}
	})
	t.Run("Conversation", func(t *testing.T) {
		// A conversation is its first computer's owner's: another owner
		// cannot add to it, and a computers:any token adds computers that
		// belong to the conversation's owner.
		mustCreate(t, ac, bhttp.CreateComputerRequest{ConversationID: "conv_a"})
		_, err := bc.CreateComputer(t.Context(), bhttp.CreateComputerRequest{ConversationID: "conv_a"})
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		anyc := bhttp.NewClient(e.url, e.ownerToken(t, "ops", append(all, "computers:any")...))
		if c := mustCreate(t, anyc, bhttp.CreateComputerRequest{ConversationID: "conv_a"}); c.Owner != "alice" {
			t.Errorf("a computers:any token's computer in alice's conversation belongs to %q", c.Owner)
		}
		if c := mustCreate(t, anyc, bhttp.CreateComputerRequest{ConversationID: "conv_new"}); c.Owner != "ops" {
			t.Errorf("a computers:any token's computer in a new conversation belongs to %q", c.Owner)
		}
		cs, err := ac.ListComputers(t.Context(), bothy.ComputerFilter{ConversationID: "conv_a"})
		if err != nil || len(cs) != 2 {
			t.Errorf("alice lists %d computers of her conversation, want 2 (%v)", len(cs), err)
		}
	})
}

// settle stops o's computer, unless destroyed, so that a command the walk
// ran leaves it cold for the file routes that follow.
func (e *env) settle(t *testing.T, c *bhttp.Client, o *owned) {
	t.Helper()
	if cm, err := c.FindComputer(t.Context(), o.computer); err != nil {
		t.Fatal(err)
	} else if cm.State != bothy.StateDestroyed {
		if _, err := c.StopComputer(t.Context(), o.computer); err != nil {
			t.Fatal(err)
		}
	}
}

// ownerToken returns the secret of a new acme token of owner.
func (e *env) ownerToken(t *testing.T, owner string, scopes ...string) string {
	t.Helper()
	_, secret, err := e.store.CreateToken(t.Context(), "acme", owner, scopes, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}
