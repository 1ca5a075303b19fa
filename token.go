package bothy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
	"time"
)

// Scopes a token may carry. A request needs the scope of its route; admin
// holds every scope.
const (
	ScopeComputersRead  = "computers:read"  // get and list computers and their revisions
	ScopeComputersWrite = "computers:write" // create, stop and destroy computers
	ScopeFilesRead      = "files:read"      // read, stat, list, glob and grep files
	ScopeFilesWrite     = "files:write"     // write, mkdir, rm, rename, symlink, chmod and batches
	// ScopeComputersAny lets the other scopes act on every owner's
	// computers of the tenant, not only the token owner's.
	ScopeComputersAny = "computers:any"
	ScopeAdmin        = "admin" // everything, including operator routes
)

// AllScopes lists every scope, in documentation order.
var AllScopes = []string{ScopeComputersRead, ScopeComputersWrite, ScopeFilesRead, ScopeFilesWrite, ScopeComputersAny, ScopeAdmin}

// TokenPrefix starts every token secret, so that a leaked secret is easy to
// recognise by secret scanners.
const TokenPrefix = "bothy_"

// Principal is who a request acts for: a resolved token.
type Principal struct {
	TenantID string `json:"tenant_id"`
	// Owner is who the token acts for inside its tenant: it acts on the
	// computers its owner created, and on others only with
	// ScopeComputersAny. Never "" for a resolved token.
	Owner   string   `json:"owner"`
	Scopes  []string `json:"scopes"`
	TokenID string   `json:"token_id,omitempty"`
}

// Can reports whether the principal holds scope, directly or through admin.
func (p *Principal) Can(scope string) bool {
	return p != nil && (slices.Contains(p.Scopes, scope) || slices.Contains(p.Scopes, ScopeAdmin))
}

// AnyOwner reports whether the principal acts on every owner's computers
// of its tenant: it holds ScopeComputersAny, directly or through admin.
func (p *Principal) AnyOwner() bool { return p.Can(ScopeComputersAny) }

// MayActOn reports whether the principal may act on c at all, scopes
// aside: c is of its tenant, and of its owner unless AnyOwner. A computer
// without an owner (from before owners were enforced) is AnyOwner's only.
// A caller that may not act on a computer must see it as not found.
func (p *Principal) MayActOn(c *Computer) bool {
	if p == nil || c == nil || c.TenantID != p.TenantID {
		return false
	}
	return p.AnyOwner() || (p.Owner != "" && c.Owner == p.Owner)
}

// Token is the stored record of an API token. The secret itself is never
// stored: only its SHA-256 digest (TokenDigest).
type Token struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id"`
	Owner     string    `json:"owner"`
	Scopes    []string  `json:"scopes"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"` // zero: never
	RevokedAt time.Time `json:"revoked_at,omitzero"` // zero: not revoked
}

// ScopeProfilePrefix starts a profile scope, "profile:NAME": the profiles
// a token may create computers with and run commands on. A token with no
// profile scope may use DefaultProfile only; admin may use every profile.
const ScopeProfilePrefix = "profile:"

// DefaultProfile is the profile of a computer created without one, and the
// one profile a token without profile scopes may use.
const DefaultProfile = "standard"

// CanUseProfile reports whether the principal's authority includes the
// profile.
func (p *Principal) CanUseProfile(profile string) bool {
	if p == nil {
		return false
	}
	a := p.Authority()
	return a.CanUseProfile(profile)
}

// ScopeAgentPrefix makes a token an agent's: "agent:ID" may poll the
// control plane as the agent ID, and nothing else. It is the only scope of
// its token, so that an agent's credential opens no API route, and it may
// expire and be revoked like any token.
const ScopeAgentPrefix = "agent:"

// ScopeEnrolPrefix makes a token a join token: "enrol:ID" may be
// exchanged, once, for an expiring agent token of agent ID (POST
// /runtime/v1/agent/credential), and nothing else. Like agent:ID it is the
// only scope of its token.
const ScopeEnrolPrefix = "enrol:"

// AgentOf returns the agent id of an agent token's scopes, or "".
func AgentOf(scopes []string) string { return singleScope(scopes, ScopeAgentPrefix) }

// EnrolOf returns the agent id of a join token's scopes, or "".
func EnrolOf(scopes []string) string { return singleScope(scopes, ScopeEnrolPrefix) }

func singleScope(scopes []string, prefix string) string {
	if len(scopes) == 1 {
		if id, ok := strings.CutPrefix(scopes[0], prefix); ok {
			return id
		}
	}
	return ""
}

// ValidateScopes reports whether scopes is a non-empty list of known
// scopes and authority scopes (profile:, egress:, secret:, budget:), or a
// single agent:ID scope.
func ValidateScopes(scopes []string) error {
	if len(scopes) == 0 {
		return Errorf(EINVALID, "a token needs at least one scope")
	}
	for _, s := range scopes {
		for _, prefix := range []string{ScopeAgentPrefix, ScopeEnrolPrefix} {
			if id, ok := strings.CutPrefix(s, prefix); ok {
				if len(scopes) != 1 {
					return Errorf(EINVALID, "an agent or join token (%s) has no other scope", s)
				}
				return ValidateID("agent id", id)
			}
		}
	}
	for _, s := range scopes {
		if name, ok := strings.CutPrefix(s, ScopeProfilePrefix); ok {
			if err := ValidateID("profile", name); err != nil {
				return err
			}
			continue
		}
		if ok, err := validateAuthorityScope(s); ok {
			if err != nil {
				return err
			}
			continue
		}
		if !slices.Contains(AllScopes, s) {
			return Errorf(EINVALID, "unknown scope %q; known scopes: %s, profile:NAME, egress:allowlist|all, secret:NAME, budget:cpu-seconds|wall-seconds|bytes=N", s, strings.Join(AllScopes, ", "))
		}
	}
	return nil
}

// NewTokenSecret returns a new secret: TokenPrefix and 32 random bytes in
// unpadded base64url.
func NewTokenSecret() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails on supported platforms
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// TokenDigest returns the hex SHA-256 digest under which a secret is stored.
// A plain hash suffices: the secret carries 256 random bits, so it cannot be
// guessed from the digest.
func TokenDigest(secret string) string {
	d := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(d[:])
}

// TokenService stores API tokens.
type TokenService interface {
	// CreateToken stores a new token of the tenant and returns it with its
	// secret, which is shown this once and never stored. scopes must be
	// known (ValidateScopes); a zero expiresAt means the token never
	// expires. An empty owner makes the token its own owner (owner = the
	// token's id), so that an ownerless token never shares computers with
	// another. A missing tenant is ENOTFOUND.
	CreateToken(ctx context.Context, tenantID, owner string, scopes []string, expiresAt time.Time) (*Token, string, error)
	// ResolveToken returns the principal of a secret, whose Owner is never
	// "" (a token stored without one is its own owner). An unknown, expired
	// or revoked secret is EUNAUTHORIZED, and the message does not say which.
	ResolveToken(ctx context.Context, secret string) (*Principal, error)
	// RevokeToken revokes a token of the tenant; revoking it again is not an
	// error. A missing token, or one of another tenant, is ENOTFOUND.
	RevokeToken(ctx context.Context, tenantID, id string) error
	// ConsumeToken resolves a secret as ResolveToken does and revokes its
	// token in the same step, for a token that may be used once (a join
	// token): of concurrent calls with one secret exactly one succeeds;
	// the others, and every later call, are EUNAUTHORIZED.
	ConsumeToken(ctx context.Context, secret string) (*Principal, error)
}
