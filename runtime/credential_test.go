package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
)

func TestSigner(t *testing.T) {
	now := time.Now()
	s := runtime.NewSigner([]byte("key-1"))
	c := runtime.Claims{TenantID: "t", ComputerID: "c", LeaseID: "l", Generation: 3, Expires: now.Add(time.Minute)}
	cred := s.Sign(c)
	got, err := s.Verify(cred, now)
	if err != nil {
		t.Fatal(err)
	}
	if got.TenantID != "t" || got.ComputerID != "c" || got.LeaseID != "l" || got.Generation != 3 || !got.Expires.Equal(c.Expires) {
		t.Fatalf("claims %+v", got)
	}
	// Expired, signed by another key, or changed in any byte: refused.
	if _, err := s.Verify(cred, now.Add(2*time.Minute)); bothy.ErrorCode(err) != bothy.EUNAUTHORIZED {
		t.Errorf("expired: %v", err)
	}
	if _, err := runtime.NewSigner([]byte("key-2")).Verify(cred, now); bothy.ErrorCode(err) != bothy.EUNAUTHORIZED {
		t.Errorf("other key: %v", err)
	}
	for i := range len(cred) {
		b := []byte(cred)
		b[i] ^= 0x01
		if _, err := s.Verify(string(b), now); err == nil {
			t.Fatalf("a credential changed at byte %d verified", i)
		}
	}
	// A generation raised by re-encoding the claims does not verify.
	forged := runtime.NewSigner([]byte("attacker")).Sign(runtime.Claims{TenantID: "t", ComputerID: "c", LeaseID: "l", Generation: 4, Expires: now.Add(time.Minute)})
	body, _, _ := strings.Cut(forged, ".")
	_, sig, _ := strings.Cut(cred, ".")
	if _, err := s.Verify(body+"."+sig, now); err == nil {
		t.Fatal("claims with another signature verified")
	}
}
