// Package secrettest is the conformance suite of bothy.SecretService. An
// implementation's test calls TestSecretService with a function that
// returns a fresh, empty service and a way to store a secret in it.
package secrettest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
)

// TestSecretService runs the conformance suite. open is called once per
// subtest and returns an empty service and a function that stores a
// secret in it (and fails the test if it cannot).
func TestSecretService(t *testing.T, open func(t *testing.T) (bothy.SecretService, func(tenantID, name string, value []byte))) {
	t.Run("OK", func(t *testing.T) {
		svc, put := open(t)
		values := map[string][]byte{
			"gh-token":     []byte("ghp_0123456789abcdef"),
			"trailing.nl":  []byte("line one\nline two\n"),
			"two_newlines": []byte("x\n\n"),
			"binary":       {0, 1, 2, 0xff, '\n', 0x80, 0},
			"big":          bytes.Repeat([]byte("0123456789abcdef"), bothy.MaxSecretBytes/16),
		}
		for name, v := range values {
			put("t1", name, v)
		}
		for name, v := range values {
			got := wantSecret(t, svc, "t1", name)
			if !bytes.Equal(got, v) {
				t.Errorf("secret %s: got %d bytes %q…, want %d bytes %q…", name, len(got), head(got), len(v), head(v))
			}
		}
		// The returned slice is the caller's.
		got := wantSecret(t, svc, "t1", "gh-token")
		got[0] = 'X'
		if again := wantSecret(t, svc, "t1", "gh-token"); !bytes.Equal(again, values["gh-token"]) {
			t.Errorf("changing a returned value changed the stored one: %q", again)
		}
	})
	t.Run("Replace", func(t *testing.T) {
		svc, put := open(t)
		put("t1", "k", []byte("first-value"))
		put("t1", "k", []byte("second"))
		if got := wantSecret(t, svc, "t1", "k"); string(got) != "second" {
			t.Errorf("after a second put: %q", got)
		}
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		svc, put := open(t)
		ctx := context.Background()
		if _, err := svc.Secret(ctx, "t1", "nothing"); bothy.ErrorCode(err) != bothy.ENOTFOUND {
			t.Errorf("secret of an empty service: %v, want ENOTFOUND", err)
		}
		put("t1", "gh", []byte("value-1"))
		if _, err := svc.Secret(ctx, "t1", "nothing"); bothy.ErrorCode(err) != bothy.ENOTFOUND {
			t.Errorf("missing secret: %v, want ENOTFOUND", err)
		}
		if _, err := svc.Secret(ctx, "t1", "GH"); bothy.ErrorCode(err) != bothy.ENOTFOUND {
			t.Errorf("names are case-sensitive: %v, want ENOTFOUND", err)
		}
	})
	t.Run("TenantIsolation", func(t *testing.T) {
		svc, put := open(t)
		ctx := context.Background()
		put("tenant-a", "gh", []byte("value-of-a"))
		if v, err := svc.Secret(ctx, "tenant-b", "gh"); bothy.ErrorCode(err) != bothy.ENOTFOUND {
			t.Fatalf("tenant b read tenant a's secret: %q, %v; want ENOTFOUND", v, err)
		}
		put("tenant-b", "gh", []byte("value-of-b"))
		if got := wantSecret(t, svc, "tenant-a", "gh"); string(got) != "value-of-a" {
			t.Errorf("tenant a: %q", got)
		}
		if got := wantSecret(t, svc, "tenant-b", "gh"); string(got) != "value-of-b" {
			t.Errorf("tenant b: %q", got)
		}
		// A tenant id that is a prefix of another's is a different tenant.
		if _, err := svc.Secret(ctx, "tenant", "gh"); bothy.ErrorCode(err) != bothy.ENOTFOUND {
			t.Errorf("tenant \"tenant\": %v, want ENOTFOUND", err)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		svc, put := open(t)
		ctx := context.Background()
		put("t1", "gh", []byte("value-1"))
		for _, name := range []string{"", ".", "..", "../t1/gh", "t1/gh", "/etc/passwd", ".hidden", "-x", "a b", "a\x00b", strings.Repeat("n", 129)} {
			if _, err := svc.Secret(ctx, "t1", name); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("name %q: %v, want EINVALID", name, err)
			}
		}
		for _, tenant := range []string{"", ".", "..", "../t1", "t1/..", "a/b", strings.Repeat("t", 129)} {
			if _, err := svc.Secret(ctx, tenant, "gh"); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("tenant %q: %v, want EINVALID", tenant, err)
			}
		}
	})
}

func wantSecret(t *testing.T, svc bothy.SecretService, tenantID, name string) []byte {
	t.Helper()
	v, err := svc.Secret(context.Background(), tenantID, name)
	if err != nil {
		t.Fatalf("secret %s of %s: %v", name, tenantID, err)
	}
	return v
}

// head shortens a value for a failure message.
func head(b []byte) []byte {
	return b[:min(len(b), 16)]
}
