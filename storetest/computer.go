package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

func testComputers(t *testing.T, open opener) {
	run(t, "CreateComputer/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		c := &bothy.Computer{ID: "c1", TenantID: "acme", Owner: "alice", ConversationID: "conv", Label: "build", Profile: "standard"}
		if err := s.CreateComputer(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		if c.State != bothy.StateCold || c.Generation != 0 || c.Revision != 0 || c.CreatedAt.IsZero() || c.UpdatedAt.IsZero() {
			t.Errorf("CreateComputer filled %+v; want state cold, generation 0, revision 0, times set", c)
		}
		checkComputer(t, mustFindComputer(t, s, "acme", "c1"), c)
	})

	run(t, "CreateComputer/KeepsSetFields", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		at := time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)
		c := mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1", State: bothy.StateActive, Generation: 3, CreatedAt: at})
		got := mustFindComputer(t, s, "acme", "c1")
		checkComputer(t, got, c)
		if got.State != bothy.StateActive || got.Generation != 3 {
			t.Errorf("state %q generation %d, want active 3", got.State, got.Generation)
		}
		if d := diffTimes("CreatedAt", got.CreatedAt, at); d != "" {
			t.Error(d)
		}
	})

	run(t, "CreateComputer/EgressAndAuthority", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		auth := &bothy.Authority{Profiles: []string{"standard"}, Egress: bothy.EgressAllowlist, Secrets: []string{"gh"},
			Budget: bothy.Budget{CPUSeconds: 60, WallSeconds: 10, Bytes: 1 << 20}}
		c := mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1", Authority: auth,
			Egress: bothy.EgressPolicy{Mode: bothy.EgressAllowlist, Allow: []string{"Example.com:443", "*.test:*"}}})
		got := mustFindComputer(t, s, "acme", "c1")
		checkComputer(t, got, c)
		if want := []string{"example.com:443", "*.test:*"}; !reflect.DeepEqual(got.Egress.Allow, want) || got.Egress.Mode != bothy.EgressAllowlist {
			t.Errorf("egress %+v, want allowlist %q", got.Egress, want)
		}
		if !reflect.DeepEqual(got.Authority, auth) {
			t.Errorf("authority %+v, want %+v", got.Authority, auth)
		}
		// The zero policy is stored as none; no authority reads back nil.
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c2"})
		if got := mustFindComputer(t, s, "acme", "c2"); got.Egress.Mode != bothy.EgressNone || got.Authority != nil {
			t.Errorf("default egress %+v authority %v, want none and nil", got.Egress, got.Authority)
		}
		err := s.CreateComputer(t.Context(), &bothy.Computer{ID: "c3", TenantID: "acme", Profile: "standard",
			Egress: bothy.EgressPolicy{Mode: bothy.EgressAllowlist}})
		WantCode(t, err, bothy.EINVALID)
	})

	run(t, "AddComputerUsage", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateTenant(t, s, "other")
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1"})
		for _, u := range []bothy.Usage{{CPUMicros: 5, PeakMemoryBytes: 100, NetworkBytes: 1}, {CPUMicros: 7, PeakMemoryBytes: 50, WallMillis: 3}} {
			if err := s.AddComputerUsage(t.Context(), "acme", "c1", u); err != nil {
				t.Fatal(err)
			}
		}
		want := bothy.Usage{CPUMicros: 12, PeakMemoryBytes: 100, NetworkBytes: 1, WallMillis: 3}
		if got := mustFindComputer(t, s, "acme", "c1").Usage; got != want {
			t.Errorf("usage %+v, want %+v", got, want)
		}
		WantCode(t, s.AddComputerUsage(t.Context(), "acme", "nope", bothy.Usage{CPUMicros: 1}), bothy.ENOTFOUND)
		WantCode(t, s.AddComputerUsage(t.Context(), "other", "c1", bothy.Usage{CPUMicros: 1}), bothy.ENOTFOUND)
	})

	run(t, "CreateComputer/ErrConflict", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		c := mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1", Label: "first"})
		err := s.CreateComputer(t.Context(), &bothy.Computer{ID: "c1", TenantID: "acme", Profile: "strong", Label: "second"})
		WantCode(t, err, bothy.ECONFLICT)
		checkComputer(t, mustFindComputer(t, s, "acme", "c1"), c)
	})

	run(t, "CreateComputer/SameIDOtherTenant", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "a")
		mustCreateTenant(t, s, "b")
		ca := mustCreateComputer(t, s, "a", &bothy.Computer{ID: "c1", Label: "of a"})
		cb := mustCreateComputer(t, s, "b", &bothy.Computer{ID: "c1", Label: "of b"})
		checkComputer(t, mustFindComputer(t, s, "a", "c1"), ca)
		checkComputer(t, mustFindComputer(t, s, "b", "c1"), cb)
	})

	run(t, "CreateComputer/ErrInvalid", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		for name, c := range map[string]*bothy.Computer{
			"no id":      {TenantID: "acme", Profile: "standard"},
			"bad id":     {ID: "../x", TenantID: "acme", Profile: "standard"},
			"no profile": {ID: "c1", TenantID: "acme"},
			"bad state":  {ID: "c1", TenantID: "acme", Profile: "standard", State: "sleeping"},
		} {
			if err := s.CreateComputer(t.Context(), c); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("%s: error %v, want code %q", name, err, bothy.EINVALID)
			}
		}
	})

	run(t, "CreateComputer/ErrTenantNotFound", func(t *testing.T) {
		s := open(t)
		err := s.CreateComputer(t.Context(), &bothy.Computer{ID: "c1", TenantID: "nobody", Profile: "standard"})
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "FindComputer/ErrNotFound", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		_, err := s.FindComputer(t.Context(), "acme", "nope")
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "FindComputer/ErrOtherTenant", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "a")
		mustCreateTenant(t, s, "b")
		mustCreateComputer(t, s, "a", &bothy.Computer{ID: "c1"})
		_, err := s.FindComputer(t.Context(), "b", "c1")
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "ListComputers/Order", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
		// Created out of order; equal times order by ID.
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "z", CreatedAt: t0.Add(2 * time.Second)})
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "b", CreatedAt: t0.Add(time.Second)})
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "a", CreatedAt: t0.Add(time.Second)})
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "y", CreatedAt: t0.Add(time.Microsecond)})
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "x", CreatedAt: t0})
		cs, err := s.ListComputers(t.Context(), "acme", bothy.ComputerFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := computerIDs(cs), []string{"x", "y", "a", "b", "z"}; !reflect.DeepEqual(got, want) {
			t.Errorf("ListComputers = %q, want %q", got, want)
		}
		checkComputer(t, cs[0], mustFindComputer(t, s, "acme", "x"))
	})

	run(t, "ListComputers/Filter", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
		for i, c := range []*bothy.Computer{
			{ID: "c1", ConversationID: "conv1", Label: "red"},
			{ID: "c2", ConversationID: "conv1", Label: "blue", State: bothy.StateActive},
			{ID: "c3", ConversationID: "conv2", Label: "red", State: bothy.StateActive},
			{ID: "c4", Label: "red"},
		} {
			c.CreatedAt = t0.Add(time.Duration(i) * time.Second)
			mustCreateComputer(t, s, "acme", c)
		}
		for _, tt := range []struct {
			name string
			f    bothy.ComputerFilter
			want []string
		}{
			{"none", bothy.ComputerFilter{}, []string{"c1", "c2", "c3", "c4"}},
			{"conversation", bothy.ComputerFilter{ConversationID: "conv1"}, []string{"c1", "c2"}},
			{"label", bothy.ComputerFilter{Label: "red"}, []string{"c1", "c3", "c4"}},
			{"state", bothy.ComputerFilter{State: bothy.StateActive}, []string{"c2", "c3"}},
			{"state cold", bothy.ComputerFilter{State: bothy.StateCold}, []string{"c1", "c4"}},
			{"label and state", bothy.ComputerFilter{Label: "red", State: bothy.StateActive}, []string{"c3"}},
			{"all three", bothy.ComputerFilter{ConversationID: "conv1", Label: "blue", State: bothy.StateActive}, []string{"c2"}},
			{"no match", bothy.ComputerFilter{ConversationID: "conv3"}, []string{}},
		} {
			cs, err := s.ListComputers(t.Context(), "acme", tt.f)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if got := computerIDs(cs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s: ListComputers = %q, want %q", tt.name, got, tt.want)
			}
		}
	})

	run(t, "ListComputers/Owner", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateTenant(t, s, "other")
		t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
		for i, c := range []*bothy.Computer{
			{ID: "a1", Owner: "alice", Label: "red"}, {ID: "b1", Owner: "bob", Label: "red"},
			{ID: "a2", Owner: "alice"}, {ID: "n1"},
		} {
			c.CreatedAt = t0.Add(time.Duration(i) * time.Second)
			mustCreateComputer(t, s, "acme", c)
		}
		mustCreateComputer(t, s, "other", &bothy.Computer{ID: "o1", Owner: "alice"})
		for _, tt := range []struct {
			f    bothy.ComputerFilter
			want []string
		}{
			{bothy.ComputerFilter{Owner: "alice"}, []string{"a1", "a2"}},
			{bothy.ComputerFilter{Owner: "bob"}, []string{"b1"}},
			{bothy.ComputerFilter{Owner: "alice", Label: "red"}, []string{"a1"}},
			{bothy.ComputerFilter{Owner: "carol"}, []string{}},
			{bothy.ComputerFilter{}, []string{"a1", "b1", "a2", "n1"}},
		} {
			cs, err := s.ListComputers(t.Context(), "acme", tt.f)
			if err != nil {
				t.Fatal(err)
			} else if got := computerIDs(cs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ListComputers(%+v) = %q, want %q", tt.f, got, tt.want)
			}
		}
	})

	run(t, "CreateComputer/ConversationOwner", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateTenant(t, s, "other")
		_, err := s.ConversationOwner(t.Context(), "acme", "conv")
		WantCode(t, err, bothy.ENOTFOUND)
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "a1", Owner: "alice", ConversationID: "conv"})
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "a2", Owner: "alice", ConversationID: "conv"})
		if owner, err := s.ConversationOwner(t.Context(), "acme", "conv"); err != nil || owner != "alice" {
			t.Errorf("ConversationOwner = %q, %v; want alice", owner, err)
		}
		// Another owner's computer in alice's conversation is refused.
		err = s.CreateComputer(t.Context(), &bothy.Computer{ID: "b1", TenantID: "acme", Owner: "bob", ConversationID: "conv", Profile: "standard"})
		WantCode(t, err, bothy.ENOTFOUND)
		_, err = s.FindComputer(t.Context(), "acme", "b1")
		WantCode(t, err, bothy.ENOTFOUND)
		// Conversations are per tenant.
		mustCreateComputer(t, s, "other", &bothy.Computer{ID: "o1", Owner: "bob", ConversationID: "conv"})
		// A refused computer claims nothing: its id and conversation stay free.
		err = s.CreateComputer(t.Context(), &bothy.Computer{ID: "a1", TenantID: "acme", Owner: "bob", ConversationID: "conv2", Profile: "standard"})
		WantCode(t, err, bothy.ECONFLICT)
		_, err = s.ConversationOwner(t.Context(), "acme", "conv2")
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "ListComputers/Paging", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
		for i, id := range []string{"c0", "c1", "c2", "c3", "c4"} {
			mustCreateComputer(t, s, "acme", &bothy.Computer{ID: id, Label: "l", CreatedAt: t0.Add(time.Duration(i) * time.Minute)})
		}
		for _, tt := range []struct {
			offset, limit int
			want          []string
		}{
			{0, 2, []string{"c0", "c1"}},
			{2, 2, []string{"c2", "c3"}},
			{4, 2, []string{"c4"}},
			{5, 2, []string{}},
			{1, 0, []string{"c1", "c2", "c3", "c4"}}, // Limit 0 means the default (100).
			{0, 5000, []string{"c0", "c1", "c2", "c3", "c4"}},
		} {
			cs, err := s.ListComputers(t.Context(), "acme", bothy.ComputerFilter{Label: "l", Offset: tt.offset, Limit: tt.limit})
			if err != nil {
				t.Fatal(err)
			}
			if got := computerIDs(cs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("offset %d limit %d: ListComputers = %q, want %q", tt.offset, tt.limit, got, tt.want)
			}
		}
		_, err := s.ListComputers(t.Context(), "acme", bothy.ComputerFilter{Offset: -1})
		WantCode(t, err, bothy.EINVALID)
	})

	run(t, "ListComputers/DefaultLimit", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		for i := range 105 {
			mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c" + string(rune('a'+i/26)) + string(rune('a'+i%26))})
		}
		cs, err := s.ListComputers(t.Context(), "acme", bothy.ComputerFilter{})
		if err != nil {
			t.Fatal(err)
		} else if len(cs) != 100 {
			t.Errorf("Limit 0 returned %d computers, want 100", len(cs))
		}
	})

	run(t, "ListComputers/OtherTenant", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "a")
		mustCreateTenant(t, s, "b")
		mustCreateComputer(t, s, "a", &bothy.Computer{ID: "c1", Label: "x"})
		mustCreateComputer(t, s, "a", &bothy.Computer{ID: "c2", Label: "x"})
		mustCreateComputer(t, s, "b", &bothy.Computer{ID: "c3", Label: "x"})
		for tenant, want := range map[string][]string{"a": {"c1", "c2"}, "b": {"c3"}, "nobody": {}} {
			cs, err := s.ListComputers(t.Context(), tenant, bothy.ComputerFilter{Label: "x"})
			if err != nil {
				t.Fatal(err)
			}
			if got := computerIDs(cs); !sameSet(got, want) || len(got) != len(want) {
				t.Errorf("tenant %s: ListComputers = %q, want %q", tenant, got, want)
			}
		}
	})

	run(t, "SetComputerState/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		c := mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1"})
		if err := s.SetComputerState(t.Context(), "acme", "c1", bothy.StateQueued); err != nil {
			t.Fatal(err)
		}
		got := mustFindComputer(t, s, "acme", "c1")
		if got.State != bothy.StateQueued {
			t.Errorf("state = %q, want queued", got.State)
		}
		if got.UpdatedAt.Before(c.UpdatedAt) {
			t.Errorf("UpdatedAt went back from %v to %v", c.UpdatedAt, got.UpdatedAt)
		}
		got.State, got.UpdatedAt = c.State, c.UpdatedAt
		checkComputer(t, got, c)
		if cs, err := s.ListComputers(t.Context(), "acme", bothy.ComputerFilter{State: bothy.StateQueued}); err != nil {
			t.Fatal(err)
		} else if len(cs) != 1 {
			t.Errorf("ListComputers(state queued) = %q", computerIDs(cs))
		}
	})

	run(t, "SetComputerState/ErrNotFound", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "a")
		mustCreateTenant(t, s, "b")
		mustCreateComputer(t, s, "a", &bothy.Computer{ID: "c1"})
		WantCode(t, s.SetComputerState(t.Context(), "a", "nope", bothy.StateActive), bothy.ENOTFOUND)
		WantCode(t, s.SetComputerState(t.Context(), "b", "c1", bothy.StateActive), bothy.ENOTFOUND)
		if got := mustFindComputer(t, s, "a", "c1"); got.State != bothy.StateCold {
			t.Errorf("another tenant changed the state to %q", got.State)
		}
	})

	run(t, "SetComputerState/ErrInvalid", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1"})
		WantCode(t, s.SetComputerState(t.Context(), "acme", "c1", "sleeping"), bothy.EINVALID)
	})
}
