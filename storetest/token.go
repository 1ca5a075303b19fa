package storetest

import (
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

func testTokens(t *testing.T, open opener) {
	run(t, "CreateToken/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		scopes := []string{bothy.ScopeComputersRead, bothy.ScopeFilesWrite}
		tok, secret, err := s.CreateToken(t.Context(), "acme", "alice", scopes, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(secret, bothy.TokenPrefix) || len(secret) < len(bothy.TokenPrefix)+43 {
			t.Errorf("secret = %q, want %s and 32 base64url bytes", secret, bothy.TokenPrefix)
		}
		if tok.ID == "" || tok.TenantID != "acme" || tok.Owner != "alice" || !reflect.DeepEqual(tok.Scopes, scopes) || tok.CreatedAt.IsZero() {
			t.Errorf("token = %+v", tok)
		}
		p, err := s.ResolveToken(t.Context(), secret)
		if err != nil {
			t.Fatal(err)
		}
		want := &bothy.Principal{TenantID: "acme", Owner: "alice", Scopes: scopes, TokenID: tok.ID}
		if !reflect.DeepEqual(p, want) {
			t.Errorf("ResolveToken = %+v, want %+v", p, want)
		}
		// Two tokens never share a secret.
		_, secret2, err := s.CreateToken(t.Context(), "acme", "alice", scopes, time.Time{})
		if err != nil {
			t.Fatal(err)
		} else if secret2 == secret {
			t.Error("two tokens got the same secret")
		}
	})

	run(t, "CreateToken/NoOwner", func(t *testing.T) {
		// A token without an owner is its own owner, never everyone's.
		s := open(t)
		mustCreateTenant(t, s, "acme")
		tok, secret, err := s.CreateToken(t.Context(), "acme", "", []string{bothy.ScopeComputersRead}, time.Time{})
		if err != nil {
			t.Fatal(err)
		} else if tok.Owner != tok.ID {
			t.Errorf("owner %q, want the token's id %q", tok.Owner, tok.ID)
		}
		if p, err := s.ResolveToken(t.Context(), secret); err != nil || p.Owner != tok.ID {
			t.Errorf("ResolveToken = %+v, %v; want owner %q", p, err, tok.ID)
		}
	})

	run(t, "CreateToken/StoresOnlyDigest", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		_, secret, err := s.CreateToken(t.Context(), "acme", "alice", []string{bothy.ScopeAdmin}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		// A secret that differs in one character resolves to nothing.
		last := secret[len(secret)-1]
		other := secret[:len(secret)-1] + map[bool]string{true: "A", false: "B"}[last != 'A']
		_, err = s.ResolveToken(t.Context(), other)
		WantCode(t, err, bothy.EUNAUTHORIZED)
		if bothy.TokenDigest(secret) == secret || len(bothy.TokenDigest(secret)) != 64 {
			t.Errorf("TokenDigest = %q, want 64 hex digits", bothy.TokenDigest(secret))
		}
	})

	run(t, "CreateToken/ErrInvalid", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		_, _, err := s.CreateToken(t.Context(), "acme", "alice", nil, time.Time{})
		WantCode(t, err, bothy.EINVALID)
		_, _, err = s.CreateToken(t.Context(), "acme", "alice", []string{"root"}, time.Time{})
		WantCode(t, err, bothy.EINVALID)
		_, _, err = s.CreateToken(t.Context(), "a b", "alice", []string{bothy.ScopeAdmin}, time.Time{})
		WantCode(t, err, bothy.EINVALID)
	})

	run(t, "CreateToken/ErrNotFound", func(t *testing.T) {
		s := open(t)
		_, _, err := s.CreateToken(t.Context(), "nobody", "alice", []string{bothy.ScopeAdmin}, time.Time{})
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "ResolveToken/ErrUnauthorized", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		for _, secret := range []string{"", "bothy_", "bothy_nope", "Bearer x", strings.Repeat("x", 1000)} {
			_, err := s.ResolveToken(t.Context(), secret)
			WantCode(t, err, bothy.EUNAUTHORIZED)
		}
	})

	run(t, "ResolveToken/Expired", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		_, past, err := s.CreateToken(t.Context(), "acme", "alice", []string{bothy.ScopeAdmin}, time.Now().Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.ResolveToken(t.Context(), past)
		WantCode(t, err, bothy.EUNAUTHORIZED)
		tok, future, err := s.CreateToken(t.Context(), "acme", "alice", []string{bothy.ScopeAdmin}, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		} else if tok.ExpiresAt.IsZero() {
			t.Error("ExpiresAt not kept")
		}
		if _, err := s.ResolveToken(t.Context(), future); err != nil {
			t.Fatal(err)
		}
	})

	run(t, "RevokeToken/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		tok, secret, err := s.CreateToken(t.Context(), "acme", "alice", []string{bothy.ScopeAdmin}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		_, keep, err := s.CreateToken(t.Context(), "acme", "alice", []string{bothy.ScopeAdmin}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeToken(t.Context(), "acme", tok.ID); err != nil {
			t.Fatal(err)
		}
		_, err = s.ResolveToken(t.Context(), secret)
		WantCode(t, err, bothy.EUNAUTHORIZED)
		// Revoking again is fine; other tokens still resolve.
		if err := s.RevokeToken(t.Context(), "acme", tok.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ResolveToken(t.Context(), keep); err != nil {
			t.Fatal(err)
		}
	})

	run(t, "RevokeToken/ErrNotFound", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateTenant(t, s, "other")
		tok, secret, err := s.CreateToken(t.Context(), "acme", "alice", []string{bothy.ScopeAdmin}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		WantCode(t, s.RevokeToken(t.Context(), "acme", "tok_missing"), bothy.ENOTFOUND)
		// Another tenant cannot revoke it.
		WantCode(t, s.RevokeToken(t.Context(), "other", tok.ID), bothy.ENOTFOUND)
		if _, err := s.ResolveToken(t.Context(), secret); err != nil {
			t.Fatal(err)
		}
	})

	run(t, "ConsumeToken/Once", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		_, secret, err := s.CreateToken(t.Context(), "acme", "agents", []string{bothy.ScopeEnrolPrefix + "host-1"}, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		// Of concurrent consumers exactly one gets the principal.
		const n = 8
		wins := make(chan *bothy.Principal, n)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := s.ConsumeToken(t.Context(), secret)
				if err == nil {
					wins <- p
				} else if bothy.ErrorCode(err) != bothy.EUNAUTHORIZED {
					t.Errorf("a losing consumer: %v, want unauthorized", err)
				}
			}()
		}
		wg.Wait()
		close(wins)
		var got []*bothy.Principal
		for p := range wins {
			got = append(got, p)
		}
		if len(got) != 1 || bothy.EnrolOf(got[0].Scopes) != "host-1" || got[0].TenantID != "acme" {
			t.Fatalf("consumers that won: %+v, want one with enrol:host-1", got)
		}
		_, err = s.ConsumeToken(t.Context(), secret)
		WantCode(t, err, bothy.EUNAUTHORIZED)
		_, err = s.ResolveToken(t.Context(), secret)
		WantCode(t, err, bothy.EUNAUTHORIZED)
	})

	run(t, "ConsumeToken/Expired", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		_, secret, err := s.CreateToken(t.Context(), "acme", "agents", []string{bothy.ScopeEnrolPrefix + "host-1"}, time.Now().Add(-time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.ConsumeToken(t.Context(), secret)
		WantCode(t, err, bothy.EUNAUTHORIZED)
	})
}
