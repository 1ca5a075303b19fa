package http

import (
	"context"
	"fmt"
	"strings"

	"github.com/bothyhq/bothy"
)

// Resources that a route's {id} names. A token acts on its owner's
// computers only (bothy.Principal.MayActOn), and a command or a lease is
// its computer's: the server checks this before any handler runs, so that
// no route can forget it, and answers another owner's resource exactly as a
// missing one.
const (
	resourceNone     = ""
	resourceComputer = "computer"
	resourceCommand  = "command"
	resourceLease    = "lease"
)

// resourceOf returns what the {id} of pattern names. A pattern with {id}
// under any other prefix panics when the server is built: a new kind of
// resource must say here how it reaches its computer before it can serve.
func resourceOf(pattern string) string {
	switch {
	case !strings.Contains(pattern, "{id}"):
		return resourceNone
	case strings.HasPrefix(pattern, "/v1/computers/{id}"):
		return resourceComputer
	case strings.HasPrefix(pattern, "/v1/commands/{id}"):
		return resourceCommand
	case strings.HasPrefix(pattern, "/v1/leases/{id}"):
		return resourceLease
	}
	panic(fmt.Sprintf("http: route %s names {id} of an unknown resource; add it to resourceOf", pattern))
}

// checkOwner answers ENOTFOUND, as for a missing resource, unless p may
// act on the computer that the {id} of kind names.
func (s *Server) checkOwner(ctx context.Context, kind, id string, p *bothy.Principal) error {
	computerID := id
	switch kind {
	case resourceNone:
		return nil
	case resourceCommand:
		cmd, err := s.store.FindCommand(ctx, p.TenantID, id)
		if err != nil {
			return err
		}
		computerID = cmd.ComputerID
	case resourceLease:
		l, err := s.store.FindLease(ctx, p.TenantID, id)
		if err != nil {
			return err
		}
		computerID = l.ComputerID
	}
	c, err := s.store.FindComputer(ctx, p.TenantID, computerID)
	if err == nil && !p.MayActOn(c) {
		err = bothy.Errorf(bothy.ENOTFOUND, "%s %q not found", kind, id)
	}
	return err
}

// listOwner returns the owner a listing of p's computers is limited to, or
// "" for every owner's.
func listOwner(p *bothy.Principal) (string, error) {
	if p.AnyOwner() {
		return "", nil
	} else if p.Owner == "" {
		// ResolveToken never returns this; an empty filter would list all.
		return "", bothy.Errorf(bothy.EFORBIDDEN, "this token has no owner")
	}
	return p.Owner, nil
}

// creatorOwner returns the owner of a computer p creates in conversation:
// p's own, or, for a token that acts on every owner's computers, the
// conversation's owner, so that a conversation's computers stay its
// owner's. The store refuses another owner's conversation to anyone else.
func (s *Server) creatorOwner(ctx context.Context, p *bothy.Principal, conversation string) (string, error) {
	if conversation == "" || !p.AnyOwner() {
		return p.Owner, nil
	}
	owner, err := s.store.ConversationOwner(ctx, p.TenantID, conversation)
	if bothy.ErrorCode(err) == bothy.ENOTFOUND {
		return p.Owner, nil
	}
	return owner, err
}
