package receipt_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/receipt"
)

// body returns a command receipt body with every kind of field filled,
// strings that need escaping included.
func body() *bothy.ReceiptBody {
	code := 3
	return &bothy.ReceiptBody{
		ID: "rct_1", Kind: bothy.ReceiptCommand, TenantID: "acme", ComputerID: "cmp_1", CommandID: "cmd_1",
		LeaseID: "lse_1", Generation: 2, WorkJobID: "job <42> & \"quoted\" \u2028 é\n", Profile: "standard",
		Provider: "bwrap", ImageDigest: receipt.ImageDigest("bwrap", "v1"),
		PolicyDigest:   receipt.PolicyDigest(map[string]string{"standard": "bwrap", "strong": "gvisor"}),
		RevisionBefore: 4, RevisionAfter: 5, Usage: bothy.ReceiptUsage{DurationMS: 1234},
		State: bothy.CommandCompleted, ExitCode: &code, OutputDigest: "sha256:abc",
		CreatedAt:  time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC),
		FinishedAt: time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC),
		IssuedAt:   time.Date(2025, 1, 2, 3, 4, 7, 0, time.UTC),
	}
}

func sign(t *testing.T, s *receipt.Signer, b *bothy.ReceiptBody) []byte {
	t.Helper()
	r, err := s.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	return receipt.Encode(r)
}

func TestVerify_OK(t *testing.T) {
	s := receipt.NewSigner(nil)
	b := body()
	enc := sign(t, s, b)
	got, err := receipt.Verify(enc, s.PublicKey())
	if err != nil {
		t.Fatalf("Verify: %v\n%s", err, enc)
	}
	if !reflect.DeepEqual(got, b) {
		t.Errorf("verified body = %+v\nwant %+v", got, b)
	}
	if got.Version != bothy.ReceiptVersion || got.KeyID != s.KeyID() {
		t.Errorf("version %d key %q, want %d %q", got.Version, got.KeyID, bothy.ReceiptVersion, s.KeyID())
	}
	// As the CLI prints it: one trailing newline.
	if _, err := receipt.Verify(append(enc, '\n'), s.PublicKey()); err != nil {
		t.Errorf("Verify with a trailing newline: %v", err)
	}
	// The lease form too.
	lb := &bothy.ReceiptBody{ID: "rct_2", Kind: bothy.ReceiptLease, TenantID: "acme", ComputerID: "cmp_1", LeaseID: "lse_1",
		Disposition: bothy.LeaseReleased, Residue: json.RawMessage(`{}`), IssuedAt: time.Now().UTC()}
	r, err := s.Sign(lb)
	if err != nil {
		t.Fatal(err)
	} else if r.SubjectKind != bothy.ReceiptLease || r.SubjectID != "lse_1" || r.TenantID != "acme" || r.ID != "rct_2" {
		t.Errorf("lease receipt = %+v", r)
	}
	if _, err := receipt.Verify(receipt.Encode(r), s.PublicKey()); err != nil {
		t.Errorf("Verify lease receipt: %v", err)
	}
}

// TestVerify_EveryByte changes each byte of an encoded receipt, in a few
// ways each, and checks that verification fails every time.
func TestVerify_EveryByte(t *testing.T) {
	s := receipt.NewSigner(nil)
	enc := sign(t, s, body())
	for i := range enc {
		for _, mod := range []func(byte) byte{
			func(c byte) byte { return c ^ 0x01 },
			func(c byte) byte { return c ^ 0x20 }, // letter case
			func(c byte) byte { return c ^ 0x80 },
			func(c byte) byte { return ' ' },
			func(c byte) byte { return '0' },
		} {
			changed := bytes.Clone(enc)
			changed[i] = mod(enc[i])
			if changed[i] == enc[i] {
				continue
			}
			if _, err := receipt.Verify(changed, s.PublicKey()); err == nil {
				t.Fatalf("byte %d changed from %q to %q verifies:\n%s", i, enc[i], changed[i], changed)
			}
		}
	}
	// A trailing byte other than one newline fails too.
	for _, tail := range []string{" ", "\n\n", "\t", "x"} {
		if _, err := receipt.Verify(append(bytes.Clone(enc), tail...), s.PublicKey()); err == nil {
			t.Errorf("trailing %q verifies", tail)
		}
	}
}

func TestVerify_ErrWrongKey(t *testing.T) {
	s, other := receipt.NewSigner(nil), receipt.NewSigner(nil)
	enc := sign(t, s, body())
	if _, err := receipt.Verify(enc, other.PublicKey()); !errors.Is(err, receipt.ErrWrongKey) {
		t.Errorf("Verify with another key: %v, want ErrWrongKey", err)
	}
	// A receipt re-labelled with the other key's id still fails, on the
	// signature: the key id is only a hint.
	forged := bytes.ReplaceAll(enc, []byte(s.KeyID()), []byte(other.KeyID()))
	if _, err := receipt.Verify(forged, other.PublicKey()); !errors.Is(err, receipt.ErrSignature) {
		t.Errorf("Verify of a relabelled receipt: %v, want ErrSignature", err)
	}
	if _, err := receipt.Verify(enc, ed25519.PublicKey{1, 2, 3}); err == nil {
		t.Error("Verify with a 3-byte key succeeded")
	}
}

func TestVerify_ErrNotCanonical(t *testing.T) {
	s := receipt.NewSigner(nil)
	enc := sign(t, s, body())
	var v any
	json.Unmarshal(enc, &v)
	pretty, _ := json.MarshalIndent(v, "", "  ")
	if _, err := receipt.Verify(pretty, s.PublicKey()); !errors.Is(err, receipt.ErrNotCanonical) {
		t.Errorf("Verify of a reformatted receipt: %v, want ErrNotCanonical", err)
	}
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{`{"b":1,"a":[true,false,null],"c":{"z":"","y":-0}}`, `{"a":[true,false,null],"b":1,"c":{"y":0,"z":""}}`},
		{` { "s" : "\u003c\u0026\u2028\/\ud83d\ude00\u001f\t" } `, "{\"s\":\"<&\u2028/\U0001F600\\u001f\\t\"}"},
		// Sorted by UTF-16 code units: U+1F600 (the surrogate pair D83D
		// DE00) before U+E000, though its UTF-8 sorts after.
		{"{\"\ue000\":2,\"\U0001F600\":1}", "{\"\U0001F600\":1,\"\ue000\":2}"},
	} {
		got, err := receipt.CanonicalizeJSON([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("CanonicalizeJSON(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":1.5}`, `{"a":1e3}`, `{"a":1} {}`, `{"a":`} {
		if got, err := receipt.CanonicalizeJSON([]byte(bad)); err == nil {
			t.Errorf("CanonicalizeJSON(%s) = %s, want an error", bad, got)
		}
	}
	p1 := receipt.PolicyDigest(map[string]string{"standard": "bwrap", "strong": "gvisor"})
	p2 := receipt.PolicyDigest(map[string]string{"strong": "gvisor", "standard": "bwrap"})
	if p1 != p2 || p1 == receipt.PolicyDigest(map[string]string{"standard": "process"}) {
		t.Errorf("PolicyDigest is not a function of the map alone: %s %s", p1, p2)
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "receipt.key")
	key, created, err := receipt.LoadOrCreateKey(path)
	if err != nil || !created {
		t.Fatalf("LoadOrCreateKey: created %v, %v", created, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode(), err)
	}
	again, created, err := receipt.LoadOrCreateKey(path)
	if err != nil || created || !again.Equal(key) {
		t.Fatalf("second LoadOrCreateKey: created %v, same %v, %v", created, again.Equal(key), err)
	}
	// A raw seed file works too.
	seed := filepath.Join(t.TempDir(), "seed")
	os.WriteFile(seed, key.Seed(), 0o600)
	if k, err := receipt.ReadKey(seed); err != nil || !k.Equal(key) {
		t.Errorf("ReadKey(seed) = %v", err)
	}
	// A key others can read is refused.
	os.Chmod(seed, 0o644)
	if _, err := receipt.ReadKey(seed); err == nil {
		t.Error("ReadKey accepted a key file of mode 0644")
	}

	// Every form of the public key parses to the same key.
	pub := key.Public().(ed25519.PublicKey)
	s := receipt.NewSigner(key)
	js, _ := json.Marshal(s.Published())
	der, _ := x509.MarshalPKIXPublicKey(pub)
	pemPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	priv, _ := os.ReadFile(path)
	for name, in := range map[string][]byte{
		"json": js, "pem": pemPub, "private": priv, "base64": []byte(base64.StdEncoding.EncodeToString(pub) + "\n"),
	} {
		got, err := receipt.ParsePublicKey(in)
		if err != nil || !got.Equal(pub) {
			t.Errorf("ParsePublicKey(%s): %v", name, err)
		}
	}
	if _, err := receipt.ParsePublicKey([]byte("bm90IGEga2V5")); err == nil {
		t.Error("ParsePublicKey accepted 9 bytes")
	}
}
