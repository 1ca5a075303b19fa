package runtime

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
)

// DefaultCredentialTTL is how long a lease credential is valid. The agent
// receives a fresh one with every poll answer, so a credential that leaks
// stops working within minutes.
const DefaultCredentialTTL = 5 * time.Minute

// Claims are what a lease credential is bound to.
type Claims struct {
	TenantID   string    `json:"t"`
	ComputerID string    `json:"c"`
	LeaseID    string    `json:"l"`
	Generation int64     `json:"g"`
	Expires    time.Time `json:"e"`
}

// Signer makes and checks lease credentials: the claims, then an
// HMAC-SHA256 over them with a key only the control plane holds. A
// credential is short-lived and names one lease of one generation, so the
// runtime protocol takes a runtime's identity and generation from it,
// never from a message.
type Signer struct {
	key []byte
}

// NewSigner returns a signer with key, or with a random key if key is
// empty (credentials then do not outlive the process, which is right for
// the embedded server: its agent polls again after a restart).
func NewSigner(key []byte) *Signer {
	if len(key) == 0 {
		key = make([]byte, 32)
		rand.Read(key)
	}
	return &Signer{key: key}
}

var b64 = base64.RawURLEncoding.Strict()

// Sign returns the credential of c.
func (s *Signer) Sign(c Claims) string {
	body, _ := json.Marshal(c)
	p := b64.EncodeToString(body)
	return "blc_" + p + "." + b64.EncodeToString(s.mac(p))
}

func (s *Signer) mac(p string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(p))
	return m.Sum(nil)
}

// Verify checks a credential's signature and expiry at now and returns its
// claims. Anything wrong is EUNAUTHORIZED.
func (s *Signer) Verify(cred string, now time.Time) (*Claims, error) {
	bad := bothy.Errorf(bothy.EUNAUTHORIZED, "lease credential is not valid")
	rest, ok := strings.CutPrefix(cred, "blc_")
	if !ok {
		return nil, bad
	}
	p, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, bad
	}
	got, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(p)) {
		return nil, bad
	}
	body, err := b64.DecodeString(p)
	if err != nil {
		return nil, bad
	}
	var c Claims
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, bad
	}
	if !now.Before(c.Expires) {
		return nil, bothy.Errorf(bothy.EUNAUTHORIZED, "lease credential expired")
	}
	return &c, nil
}
