package control

import (
	"context"
	"strings"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
)

// AgentCredential implements runtime.Control: a join token of the agent
// (enrol:ID) or the agent's current agent token, either consumed (revoked
// in the same step), buys a new agent token that expires after
// Config.AgentCredentialTTL, of the same tenant and owner.
func (c *Controller) AgentCredential(ctx context.Context, token string, req *runtime.CredentialRequest) (*runtime.CredentialResponse, error) {
	if err := bothy.ValidateID("agent id", req.AgentID); err != nil {
		return nil, err
	}
	refused := bothy.Errorf(bothy.EUNAUTHORIZED, "not a join token or an agent token of agent %q, or used, expired or revoked", req.AgentID)
	if !strings.HasPrefix(token, bothy.TokenPrefix) {
		return nil, refused
	}
	p, err := c.store.ResolveToken(ctx, token)
	if err != nil {
		if code := bothy.ErrorCode(err); code != bothy.EUNAUTHORIZED {
			return nil, err
		}
		return nil, refused
	}
	renewal := false
	switch {
	case bothy.EnrolOf(p.Scopes) == req.AgentID:
		if p, err = c.store.ConsumeToken(ctx, token); err != nil {
			if bothy.ErrorCode(err) != bothy.EUNAUTHORIZED {
				return nil, err
			}
			return nil, refused
		}
	case bothy.AgentOf(p.Scopes) == req.AgentID:
		// Consumed like a join token, so that of two renewals with one
		// token (a thief's and the agent's) one wins.
		if p, err = c.store.ConsumeToken(ctx, token); err != nil {
			if bothy.ErrorCode(err) != bothy.EUNAUTHORIZED {
				return nil, err
			}
			return nil, refused
		}
		renewal = true
	default:
		return nil, refused
	}
	expires := c.now().Add(c.cfg.AgentCredentialTTL).UTC()
	t, secret, err := c.store.CreateToken(ctx, p.TenantID, p.Owner, []string{bothy.ScopeAgentPrefix + req.AgentID}, expires)
	if err != nil {
		return nil, err
	}
	c.log.Info("agent credential issued", "agent", req.AgentID, "token", t.ID, "renewal", renewal, "expires", expires)
	return &runtime.CredentialResponse{Token: secret, ExpiresAt: t.ExpiresAt}, nil
}

// AuthenticateEnrol implements runtime.Authenticator: a store token that
// is a join token or an agent token, of any agent.
func (c *Controller) AuthenticateEnrol(ctx context.Context, token string) error {
	if strings.HasPrefix(token, bothy.TokenPrefix) {
		if p, err := c.store.ResolveToken(ctx, token); err == nil && (bothy.AgentOf(p.Scopes) != "" || bothy.EnrolOf(p.Scopes) != "") {
			return nil
		} else if err != nil && bothy.ErrorCode(err) != bothy.EUNAUTHORIZED {
			return err
		}
	}
	return bothy.Errorf(bothy.EUNAUTHORIZED, "not a join token or an agent token")
}
