package http_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/storetest"
)

func ids(cs []*bothy.Computer) []string {
	var s []string
	for _, c := range cs {
		s = append(s, c.ID)
	}
	return s
}

func testComputers(t *testing.T, e *env) {
	t.Run("Create", func(t *testing.T) {
		r := e.raw(t, "POST", "/v1/computers", e.acmeToken, strings.NewReader(`{}`))
		r.want(t, 201, "")
		var m map[string]any
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"id", "state", "generation", "revision", "profile", "label", "conversation_id", "created_at"} {
			if _, ok := m[k]; !ok {
				t.Errorf("created computer lacks %q: %s", k, r.body)
			}
		}
		if m["profile"] != "standard" || m["state"] != "cold" || !strings.HasPrefix(m["id"].(string), "cmp_") {
			t.Errorf("created computer = %s", r.body)
		}
		c := mustCreate(t, e.acme, bhttp.CreateComputerRequest{Profile: "standard", Label: "l1", ConversationID: "conv"})
		if c.Label != "l1" || c.ConversationID != "conv" || c.Owner != "tester" || c.Generation != 0 || c.Revision != 0 || c.CreatedAt.IsZero() {
			t.Errorf("CreateComputer = %+v", c)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		_, err := e.acme.CreateComputer(t.Context(), bhttp.CreateComputerRequest{Profile: "strong"})
		storetest.WantCode(t, err, bothy.EINVALID)
		e.raw(t, "POST", "/v1/computers", e.acmeToken, strings.NewReader(`{"profile":"gpu"}`)).want(t, 400, bothy.EINVALID)
		e.raw(t, "POST", "/v1/computers", e.acmeToken, strings.NewReader(`{"provider":"bwrap"}`)).want(t, 400, bothy.EINVALID)
		e.raw(t, "POST", "/v1/computers", e.acmeToken, strings.NewReader(`{`)).want(t, 400, bothy.EINVALID)
		e.raw(t, "POST", "/v1/computers", e.acmeToken, strings.NewReader(`{"label":"`+strings.Repeat("x", 300)+`"}`)).want(t, 400, bothy.EINVALID)
		e.raw(t, "GET", "/v1/computers?state=warm", e.acmeToken, nil).want(t, 400, bothy.EINVALID)
		e.raw(t, "GET", "/v1/computers?limit=-1", e.acmeToken, nil).want(t, 400, bothy.EINVALID)
		e.raw(t, "POST", "/v1/computers", e.acmeToken, strings.NewReader(`{"label":"`+strings.Repeat("x", 2<<20)+`"}`)).want(t, 413, bothy.ETOOLARGE)
		e.raw(t, "GET", "/v1/nothing", e.acmeToken, nil).want(t, 404, bothy.ENOTFOUND)
	})
	t.Run("List", func(t *testing.T) {
		ctx := t.Context()
		a := mustCreate(t, e.acme, bhttp.CreateComputerRequest{Label: "list-a", ConversationID: "list-conv"})
		b := mustCreate(t, e.acme, bhttp.CreateComputerRequest{Label: "list-b", ConversationID: "list-conv"})
		c := mustCreate(t, e.acme, bhttp.CreateComputerRequest{Label: "list-a", ConversationID: "list-other"})
		for _, tc := range []struct {
			f    bothy.ComputerFilter
			want []string
		}{
			{bothy.ComputerFilter{ConversationID: "list-conv"}, []string{a.ID, b.ID}},
			{bothy.ComputerFilter{Label: "list-a"}, []string{a.ID, c.ID}},
			{bothy.ComputerFilter{Label: "list-a", ConversationID: "list-other"}, []string{c.ID}},
			{bothy.ComputerFilter{ConversationID: "list-conv", Limit: 1}, []string{a.ID}},
			{bothy.ComputerFilter{ConversationID: "list-conv", Offset: 1}, []string{b.ID}},
			{bothy.ComputerFilter{ConversationID: "nobody"}, nil},
		} {
			got, err := e.acme.ListComputers(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			} else if !slices.Equal(ids(got), tc.want) {
				t.Errorf("ListComputers(%+v) = %q, want %q", tc.f, ids(got), tc.want)
			}
		}
		if _, err := e.acme.DestroyComputer(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		got, err := e.acme.ListComputers(ctx, bothy.ComputerFilter{ConversationID: "list-conv", State: bothy.StateDestroyed})
		if err != nil {
			t.Fatal(err)
		} else if !slices.Equal(ids(got), []string{b.ID}) {
			t.Errorf("destroyed = %q, want %q", ids(got), b.ID)
		}
		got, err = e.acme.ListComputers(ctx, bothy.ComputerFilter{ConversationID: "list-conv", State: bothy.StateCold})
		if err != nil {
			t.Fatal(err)
		} else if !slices.Equal(ids(got), []string{a.ID}) {
			t.Errorf("cold = %q, want %q", ids(got), a.ID)
		}
	})
	t.Run("GetStopDestroy", func(t *testing.T) {
		ctx := t.Context()
		c := mustCreate(t, e.acme, bhttp.CreateComputerRequest{Label: "gsd"})
		if _, err := e.acme.WriteFile(ctx, "", c.ID, "f.txt", strings.NewReader("hello"), bothy.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := e.acme.FindComputer(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		} else if got.ID != c.ID || got.Revision != 1 || got.RootDigest == "" || got.Label != "gsd" {
			t.Errorf("FindComputer = %+v", got)
		}
		// A cold computer stops as a no-op.
		if st, err := e.acme.StopComputer(ctx, c.ID); err != nil {
			t.Fatal(err)
		} else if st.State != bothy.StateCold || st.Revision != 1 {
			t.Errorf("StopComputer = %+v", st)
		}
		d, err := e.acme.DestroyComputer(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		} else if d.State != bothy.StateDestroyed {
			t.Errorf("DestroyComputer state = %q", d.State)
		}
		// Destroying again is a no-op; stopping is a conflict; files are gone.
		if _, err := e.acme.DestroyComputer(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		_, err = e.acme.StopComputer(ctx, c.ID)
		storetest.WantCode(t, err, bothy.ECONFLICT)
		_, _, err = e.acme.ReadFile(ctx, "", c.ID, "f.txt", 0, -1)
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		e.raw(t, "GET", "/v1/computers/"+c.ID+"/files/f.txt", e.acmeToken, nil).want(t, 404, bothy.ENOTFOUND)
		_, err = e.acme.FindComputer(ctx, "cmp_missing")
		storetest.WantCode(t, err, bothy.ENOTFOUND)
		e.raw(t, "DELETE", "/v1/computers/cmp_missing", e.acmeToken, nil).want(t, 404, bothy.ENOTFOUND)
	})
}
