package sqldb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
)

// CreateToken stores a new token under the digest of a new secret and
// returns the token with the secret.
func (s *DB) CreateToken(ctx context.Context, tenantID, owner string, scopes []string, expiresAt time.Time) (*bothy.Token, string, error) {
	if err := bothy.ValidateID("tenant id", tenantID); err != nil {
		return nil, "", fmt.Errorf("create token: %w", err)
	} else if err := bothy.ValidateScopes(scopes); err != nil {
		return nil, "", fmt.Errorf("create token: %w", err)
	} else if len(owner) > 256 {
		return nil, "", fmt.Errorf("create token: %w", bothy.Errorf(bothy.EINVALID, "token owner must be at most 256 bytes"))
	}
	for _, sc := range scopes {
		if strings.ContainsAny(sc, " ") {
			return nil, "", fmt.Errorf("create token: %w", bothy.Errorf(bothy.EINVALID, "scope %q holds a space", sc))
		}
	}
	id := make([]byte, 12)
	rand.Read(id)
	t := &bothy.Token{
		ID: "tok_" + hex.EncodeToString(id), TenantID: tenantID, Owner: owner,
		Scopes: append([]string(nil), scopes...), CreatedAt: now(), ExpiresAt: utcMicro(expiresAt),
	}
	if t.Owner == "" {
		// An ownerless token is its own owner, never everyone's.
		t.Owner = t.ID
	}
	secret := bothy.NewTokenSecret()
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM tenants WHERE id = ?`), tenantID).Scan(&n); err != nil {
			return err
		} else if n == 0 {
			return bothy.Errorf(bothy.ENOTFOUND, "tenant %q not found", tenantID)
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO tokens (tenant_id, id, digest, owner, scopes, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`),
			t.TenantID, t.ID, bothy.TokenDigest(secret), t.Owner, strings.Join(t.Scopes, " "),
			s.timeArg(t.CreatedAt), s.nullTimeArg(t.ExpiresAt))
		return s.conflict(err, "token %q already exists", t.ID)
	})
	if err != nil {
		return nil, "", fmt.Errorf("create token: %w", err)
	}
	return t, secret, nil
}

// ResolveToken returns the principal of an unexpired, unrevoked secret.
func (s *DB) ResolveToken(ctx context.Context, secret string) (*bothy.Principal, error) {
	unauthorized := bothy.Errorf(bothy.EUNAUTHORIZED, "invalid, expired or revoked token")
	if !strings.HasPrefix(secret, bothy.TokenPrefix) || len(secret) > 256 {
		return nil, unauthorized
	}
	var p bothy.Principal
	var scopes string
	var expires, revoked time.Time
	err := s.db.QueryRowContext(ctx, s.q(`SELECT tenant_id, id, owner, scopes, expires_at, revoked_at FROM tokens WHERE digest = ?`),
		bothy.TokenDigest(secret)).Scan(&p.TenantID, &p.TokenID, &p.Owner, &scopes, scanTime(&expires), scanTime(&revoked))
	if err == sql.ErrNoRows {
		return nil, unauthorized
	} else if err != nil {
		return nil, fmt.Errorf("resolve token: %w", s.classify(err))
	}
	if !revoked.IsZero() || (!expires.IsZero() && !now().Before(expires)) {
		return nil, unauthorized
	}
	p.Scopes = strings.Fields(scopes)
	if p.Owner == "" {
		// Migration 0007 gave every stored token an owner; a row written
		// since by other means still never resolves to no owner.
		p.Owner = p.TokenID
	}
	return &p, nil
}

// ConsumeToken resolves the secret and revokes its token: the revocation
// is conditional on the token being unrevoked, so one caller wins.
func (s *DB) ConsumeToken(ctx context.Context, secret string) (*bothy.Principal, error) {
	p, err := s.ResolveToken(ctx, secret)
	if err != nil {
		return nil, err
	}
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE tokens SET revoked_at = ? WHERE digest = ? AND revoked_at IS NULL`),
		s.timeArg(now()), bothy.TokenDigest(secret))
	if err != nil {
		return nil, fmt.Errorf("consume token: %w", s.classify(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, fmt.Errorf("consume token: %w", s.classify(err))
	} else if n != 1 {
		return nil, bothy.Errorf(bothy.EUNAUTHORIZED, "invalid, expired or revoked token")
	}
	return p, nil
}

// RevokeToken marks a token revoked, keeping the first revocation time.
func (s *DB) RevokeToken(ctx context.Context, tenantID, id string) error {
	err := s.withTx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM tokens WHERE tenant_id = ? AND id = ?`), tenantID, id).Scan(&n); err != nil {
			return err
		} else if n == 0 {
			return bothy.Errorf(bothy.ENOTFOUND, "token %q not found", id)
		}
		_, err := tx.ExecContext(ctx, s.q(`UPDATE tokens SET revoked_at = ? WHERE tenant_id = ? AND id = ? AND revoked_at IS NULL`),
			s.timeArg(now()), tenantID, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	return nil
}
