// Package receipt signs and verifies bothy's receipts: signed evidence of
// every command that ended and every lease that was released.
//
// A receipt's body (a bothy.ReceiptBody) is encoded as canonical JSON
// (Canonical: RFC 8785 for integers-only JSON) and signed with Ed25519. It
// is served and stored as the canonical encoding of the envelope
//
//	{"body":{…},"key_id":"ed25519:…","signature":"<base64 of 64 bytes>"}
//
// Verify accepts exactly that encoding (and one trailing newline): the body
// must be byte for byte what was signed, and every other byte must be the
// one Encode writes, so any changed byte of a receipt fails verification.
package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bothyhq/bothy"
)

// Algorithm names the signature algorithm in a published key.
const Algorithm = "ed25519"

// Signer signs receipt bodies with one Ed25519 key.
type Signer struct {
	key ed25519.PrivateKey
	id  string
}

// NewSigner returns a signer with key; a nil key is a new random one (for
// tests: its receipts cannot be verified after the process ends).
func NewSigner(key ed25519.PrivateKey) *Signer {
	if key == nil {
		_, key, _ = ed25519.GenerateKey(rand.Reader)
	}
	return &Signer{key: key, id: KeyID(key.Public().(ed25519.PublicKey))}
}

// KeyID returns the id of the signer's key.
func (s *Signer) KeyID() string { return s.id }

// PublicKey returns the key that verifies the signer's receipts.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Published returns the public key as GET /v1/receipts/key serves it.
func (s *Signer) Published() *bothy.ReceiptKey {
	return &bothy.ReceiptKey{KeyID: s.id, Algorithm: Algorithm, PublicKey: s.PublicKey()}
}

// Sign sets body's Version and KeyID, encodes it canonically and signs it.
// The receipt's subject, tenant and id come from the body.
func (s *Signer) Sign(body *bothy.ReceiptBody) (*bothy.Receipt, error) {
	body.Version, body.KeyID = bothy.ReceiptVersion, s.id
	subject := body.CommandID
	if body.Kind == bothy.ReceiptLease {
		subject = body.LeaseID
	}
	b, err := Canonical(body)
	if err != nil {
		return nil, fmt.Errorf("sign receipt: %w", err)
	}
	return &bothy.Receipt{
		TenantID: body.TenantID, ID: body.ID, SubjectKind: body.Kind, SubjectID: subject,
		Body: b, KeyID: s.id, Signature: ed25519.Sign(s.key, b), CreatedAt: body.IssuedAt,
	}, nil
}

// KeyID returns the id of a public key: "ed25519:" and the first 16 hex
// digits of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return Algorithm + ":" + hex.EncodeToString(sum[:8])
}

// envelope is a served receipt. Its fields are in canonical order and
// encode canonically: key ids and base64 need no escaping.
type envelope struct {
	Body      json.RawMessage `json:"body"`
	KeyID     string          `json:"key_id"`
	Signature string          `json:"signature"`
}

// Encode returns the served form of r, without a trailing newline.
func Encode(r *bothy.Receipt) []byte {
	var b bytes.Buffer
	b.WriteString(`{"body":`)
	b.Write(r.Body)
	b.WriteString(`,"key_id":`)
	writeString(&b, r.KeyID)
	b.WriteString(`,"signature":"`)
	b.WriteString(base64.StdEncoding.EncodeToString(r.Signature))
	b.WriteString(`"}`)
	return b.Bytes()
}

// Errors of Verify, wrapped with the detail; errors.Is tells them apart.
var (
	ErrMalformed    = errors.New("the receipt is not a receipt envelope")
	ErrNotCanonical = errors.New("the receipt is not in canonical form")
	ErrWrongKey     = errors.New("the receipt names another signing key")
	ErrSignature    = errors.New("the signature does not match the body")
)

// Verify checks an encoded receipt (as Encode wrote it, optionally followed
// by one newline) against pub, and returns its body. It fails, with an
// error wrapping one of the Err* values, unless every byte is as signed
// and encoded: the envelope must decode strictly (exactly its three
// members), the body must be canonical, the key ids in the envelope and
// the body must both name pub, the signature must be strict base64 of 64
// bytes, the whole must equal its canonical re-encoding, and the signature
// must verify.
func Verify(encoded []byte, pub ed25519.PublicKey) (*bothy.ReceiptBody, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("verify receipt: the public key is %d bytes, not %d", len(pub), ed25519.PublicKeySize)
	}
	doc := bytes.TrimSuffix(encoded, []byte("\n"))
	var members map[string]json.RawMessage
	if err := json.Unmarshal(doc, &members); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	for _, k := range []string{"body", "key_id", "signature"} {
		if _, ok := members[k]; !ok {
			return nil, fmt.Errorf("%w: no %q member", ErrMalformed, k)
		}
	}
	if len(members) != 3 {
		return nil, fmt.Errorf("%w: it has members other than body, key_id and signature", ErrMalformed)
	}
	var env envelope
	if err := json.Unmarshal(members["key_id"], &env.KeyID); err != nil {
		return nil, fmt.Errorf("%w: key_id: %v", ErrMalformed, err)
	} else if err := json.Unmarshal(members["signature"], &env.Signature); err != nil {
		return nil, fmt.Errorf("%w: signature: %v", ErrMalformed, err)
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(env.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: the signature is not strict base64 of %d bytes", ErrMalformed, ed25519.SignatureSize)
	}
	body := []byte(members["body"])
	var rb bothy.ReceiptBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rb); err != nil {
		return nil, fmt.Errorf("%w: body: %v", ErrMalformed, err)
	}
	if canon, err := CanonicalizeJSON(body); err != nil {
		return nil, fmt.Errorf("%w: body: %v", ErrNotCanonical, err)
	} else if !bytes.Equal(canon, body) {
		return nil, fmt.Errorf("%w: the body is not its canonical encoding (was it reformatted?)", ErrNotCanonical)
	}
	want := KeyID(pub)
	if env.KeyID != want || rb.KeyID != want {
		return nil, fmt.Errorf("%w: it names key %q (body: %q), the public key is %q", ErrWrongKey, env.KeyID, rb.KeyID, want)
	}
	if !bytes.Equal(doc, Encode(&bothy.Receipt{Body: body, KeyID: env.KeyID, Signature: sig})) {
		return nil, fmt.Errorf("%w: the envelope is not its canonical encoding (was it reformatted?)", ErrNotCanonical)
	}
	if !ed25519.Verify(pub, body, sig) {
		return nil, fmt.Errorf("%w (key %s)", ErrSignature, want)
	}
	return &rb, nil
}

// PolicyDigest returns the digest of a server's policy (a bothy.Policy, or
// a bare profile → provider map): "sha256:" and the hex SHA-256 of its
// canonical JSON.
func PolicyDigest(policy any) string {
	if m, ok := policy.(map[string]string); ok && m == nil {
		policy = map[string]string{}
	}
	b, _ := Canonical(policy) // maps of strings and integer structs always encode
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ImageDigest returns the digest that stands for what a provider runs. For
// now it is "sha256:" and the hex SHA-256 of the canonical JSON of
// {"provider": name, "version": version} (the server's version), not a
// digest of a root filesystem: bwrap runs the host's.
func ImageDigest(provider, version string) string {
	b, _ := Canonical(map[string]string{"provider": provider, "version": version})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
