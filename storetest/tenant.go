package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

func testTenants(t *testing.T, open opener) {
	run(t, "CreateTenant/OK", func(t *testing.T) {
		s := open(t)
		tn := &bothy.Tenant{ID: "acme", Name: "Acme", HashKey: hashKey("acme")}
		if err := s.CreateTenant(t.Context(), tn); err != nil {
			t.Fatal(err)
		}
		if tn.CreatedAt.IsZero() {
			t.Error("CreatedAt not filled")
		}
		got, err := s.FindTenant(t.Context(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != "acme" || got.Name != "Acme" || !equalBytes(got.HashKey, hashKey("acme")) {
			t.Errorf("FindTenant = %+v, want %+v", got, tn)
		}
		if d := diffTimes("CreatedAt", got.CreatedAt, tn.CreatedAt); d != "" {
			t.Error(d)
		}
	})

	run(t, "CreateTenant/KeepsCreatedAt", func(t *testing.T) {
		s := open(t)
		at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
		tn := &bothy.Tenant{ID: "acme", HashKey: hashKey("acme"), CreatedAt: at}
		if err := s.CreateTenant(t.Context(), tn); err != nil {
			t.Fatal(err)
		}
		got, err := s.FindTenant(t.Context(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		if d := diffTimes("CreatedAt", got.CreatedAt, at); d != "" {
			t.Error(d)
		}
	})

	run(t, "CreateTenant/ErrConflict", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		err := s.CreateTenant(t.Context(), &bothy.Tenant{ID: "acme", Name: "Other", HashKey: hashKey("other")})
		WantCode(t, err, bothy.ECONFLICT)
		got, err := s.FindTenant(t.Context(), "acme")
		if err != nil {
			t.Fatal(err)
		} else if got.Name != "Tenant acme" {
			t.Errorf("conflicting create changed the tenant: name %q", got.Name)
		}
	})

	run(t, "CreateTenant/ErrInvalid", func(t *testing.T) {
		s := open(t)
		WantCode(t, s.CreateTenant(t.Context(), &bothy.Tenant{ID: "", HashKey: hashKey("x")}), bothy.EINVALID)
		WantCode(t, s.CreateTenant(t.Context(), &bothy.Tenant{ID: "a b", HashKey: hashKey("x")}), bothy.EINVALID)
		WantCode(t, s.CreateTenant(t.Context(), &bothy.Tenant{ID: "acme", HashKey: []byte("short")}), bothy.EINVALID)
		if ts, err := s.ListTenants(t.Context()); err != nil {
			t.Fatal(err)
		} else if len(ts) != 0 {
			t.Errorf("invalid tenants were stored: %d", len(ts))
		}
	})

	run(t, "FindTenant/ErrNotFound", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		_, err := s.FindTenant(t.Context(), "nobody")
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "ListTenants/OK", func(t *testing.T) {
		s := open(t)
		if ts, err := s.ListTenants(t.Context()); err != nil {
			t.Fatal(err)
		} else if len(ts) != 0 {
			t.Fatalf("empty store lists %d tenants", len(ts))
		}
		for _, id := range []string{"b", "a_1", "C", "a"} {
			mustCreateTenant(t, s, id)
		}
		ts, err := s.ListTenants(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tn := range ts {
			ids = append(ids, tn.ID)
			if !equalBytes(tn.HashKey, hashKey(tn.ID)) {
				t.Errorf("tenant %s: wrong hash key", tn.ID)
			}
		}
		// Byte order, not a locale's collation.
		if want := []string{"C", "a", "a_1", "b"}; !reflect.DeepEqual(ids, want) {
			t.Errorf("ListTenants = %q, want %q", ids, want)
		}
	})
}
