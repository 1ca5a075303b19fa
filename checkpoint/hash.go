// Package checkpoint is bothy's on-storage workspace format and its engine:
// keyed BLAKE3 content addresses, content-defined chunking, zstd frames in
// packs with a blob table at their tail, Merkle directory trees, directory
// checkpoint with a stat cache, restore, diff and pack garbage collection.
// docs/checkpoint-format.md describes the format.
package checkpoint

import (
	"encoding/hex"
	"sync"

	"github.com/bothyhq/bothy"
	"github.com/zeebo/blake3"
)

// Hash is a 32-byte keyed BLAKE3 digest (key = the tenant's Tenant.HashKey).
type Hash [32]byte

// String returns h as 64 lowercase hex characters.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is all zero bytes.
func (h Hash) IsZero() bool { return h == Hash{} }

// ParseHash parses 64 lowercase hex characters.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 64 {
		return h, bothy.Errorf(bothy.EINVALID, "hash %q must be 64 hex characters", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return h, bothy.Errorf(bothy.EINVALID, "hash %q must be lowercase hex", s)
		}
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, bothy.Errorf(bothy.EINVALID, "hash %q: %v", s, err)
	}
	return h, nil
}

// hasher computes keyed BLAKE3 digests. Keyed hashers are pooled because
// creating one derives the key schedule.
type hasher struct {
	key   []byte
	proto *blake3.Hasher
	pool  sync.Pool
}

func newHasher(key []byte) (*hasher, error) {
	if len(key) != 32 {
		return nil, bothy.Errorf(bothy.EINVALID, "hash key must be 32 bytes")
	}
	p, err := blake3.NewKeyed(key)
	if err != nil {
		return nil, bothy.Errorf(bothy.EINVALID, "hash key: %v", err)
	}
	hs := &hasher{key: append([]byte(nil), key...), proto: p}
	hs.pool.New = func() any { return hs.proto.Clone() }
	return hs, nil
}

func (hs *hasher) sum(parts ...[]byte) Hash {
	h := hs.pool.Get().(*blake3.Hasher)
	h.Reset()
	for _, p := range parts {
		h.Write(p)
	}
	var out Hash
	h.Sum(out[:0])
	hs.pool.Put(h)
	return out
}
