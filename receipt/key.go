package receipt

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ReadKey reads a signing key: a PEM "PRIVATE KEY" block (PKCS #8), or a
// raw 32-byte Ed25519 seed. A key file that others may read is refused.
func ReadKey(path string) (ed25519.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read receipt key: %w", err)
	} else if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("read receipt key: %s has mode %04o; it must be readable by its owner only (chmod 600)", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read receipt key: %w", err)
	}
	key, err := ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("read receipt key %s: %w", path, err)
	}
	return key, nil
}

// ParsePrivateKey parses a PEM PKCS #8 Ed25519 key or a raw 32-byte seed.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	if len(b) == ed25519.SeedSize {
		return ed25519.NewKeyFromSeed(b), nil
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("want a PEM PRIVATE KEY block (PKCS #8) or a 32-byte seed")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the key is a %T, not Ed25519", k)
	}
	return key, nil
}

// LoadOrCreateKey reads the signing key at path, creating it first (a new
// random key, PEM PKCS #8, mode 0600) if the file does not exist. created
// reports a new key.
func LoadOrCreateKey(path string) (key ed25519.PrivateKey, created bool, err error) {
	if _, err := os.Stat(path); err == nil {
		key, err := ReadKey(path)
		return key, false, err
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("read receipt key: %w", err)
	}
	_, key, err = ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, false, fmt.Errorf("create receipt key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, false, fmt.Errorf("create receipt key: %w", err)
	}
	// O_EXCL: of two servers starting on one directory, one creates it and
	// the other reads the winner's key.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		key, err := ReadKey(path)
		return key, false, err
	} else if err != nil {
		return nil, false, fmt.Errorf("create receipt key: %w", err)
	}
	err = pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, false, fmt.Errorf("create receipt key: %w", err)
	}
	return key, true, nil
}

// ParsePublicKey parses a verification key in any form a person is likely
// to hold: the JSON that GET /v1/receipts/key answers, a PEM "PUBLIC KEY"
// (PKIX) or "PRIVATE KEY" (PKCS #8) block, or the standard base64 of the
// 32-byte key.
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	s := strings.TrimSpace(string(b))
	switch {
	case strings.HasPrefix(s, "{"):
		var k struct {
			Algorithm string `json:"algorithm"`
			PublicKey []byte `json:"public_key"`
		}
		if err := json.Unmarshal([]byte(s), &k); err != nil {
			return nil, fmt.Errorf("parse public key: %w", err)
		} else if k.Algorithm != Algorithm || len(k.PublicKey) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("parse public key: want algorithm %q and a %d-byte public_key", Algorithm, ed25519.PublicKeySize)
		}
		return ed25519.PublicKey(k.PublicKey), nil
	case strings.HasPrefix(s, "-----BEGIN"):
		block, _ := pem.Decode([]byte(s))
		if block == nil {
			return nil, errors.New("parse public key: bad PEM")
		}
		if block.Type == "PRIVATE KEY" {
			key, err := ParsePrivateKey([]byte(s))
			if err != nil {
				return nil, fmt.Errorf("parse public key: %w", err)
			}
			return key.Public().(ed25519.PublicKey), nil
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse public key: %w", err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("parse public key: the key is a %T, not Ed25519", k)
		}
		return pub, nil
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("parse public key: want the base64 of a %d-byte Ed25519 key, the JSON of /v1/receipts/key, or PEM", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}
