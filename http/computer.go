package http

import (
	nethttp "net/http"
	"slices"

	"github.com/bothyhq/bothy"
)

// CreateComputerRequest is the body of POST /v1/computers.
type CreateComputerRequest struct {
	Profile        string `json:"profile,omitempty"` // default "standard"
	Label          string `json:"label,omitempty"`
	ConversationID string `json:"conversation_id,omitempty"`
	// WorkJobID is the caller's external reference, stated in receipts.
	WorkJobID string `json:"work_job_id,omitempty"`
	// Egress is what its commands may reach; default none.
	Egress bothy.EgressPolicy `json:"egress"`
}

// ComputerList is the body of a computer listing.
type ComputerList struct {
	Computers []*bothy.Computer `json:"computers"`
}

// RevisionList is the body of a revision listing, newest first.
type RevisionList struct {
	Revisions []*bothy.Revision `json:"revisions"`
}

func (s *Server) handleCreateComputer(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	var req CreateComputerRequest
	if err := s.readJSON(w, r, s.opts.MaxJSONSize, &req); err != nil {
		return err
	}
	if req.Profile == "" {
		req.Profile = "standard"
	}
	if !slices.Contains(s.opts.Profiles, req.Profile) {
		return bothy.Errorf(bothy.EINVALID, "unknown profile %q", req.Profile)
	}
	auth := p.Authority()
	if !auth.CanUseProfile(req.Profile) {
		return bothy.Errorf(bothy.EFORBIDDEN, "this token may not use profile %q (it needs the scope %s%s)", req.Profile, bothy.ScopeProfilePrefix, req.Profile)
	} else if err := req.Egress.Validate(); err != nil {
		return err
	} else if !auth.CanUseEgress(req.Egress.Mode) {
		return bothy.Errorf(bothy.EFORBIDDEN, "this token may not create a computer with egress %q (its ceiling is %q; it needs the scope %s%s)", req.Egress.Mode, auth.Egress, bothy.ScopeEgressPrefix, req.Egress.Mode)
	}
	// A computer is its creator's owner's, or its conversation's owner's.
	owner, err := s.creatorOwner(r.Context(), p, req.ConversationID)
	if err != nil {
		return err
	}
	c := &bothy.Computer{
		ID: newID("cmp_"), TenantID: p.TenantID, Owner: owner, Profile: req.Profile,
		Label: req.Label, ConversationID: req.ConversationID, WorkJobID: req.WorkJobID, State: bothy.StateCold,
		Egress: req.Egress, Authority: &auth,
	}
	if err := s.store.CreateComputer(r.Context(), c); err != nil {
		return err
	}
	writeJSON(w, nethttp.StatusCreated, c)
	return nil
}

func (s *Server) handleListComputers(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	q := r.URL.Query()
	f := bothy.ComputerFilter{ConversationID: q.Get("conversation_id"), Label: q.Get("label"), State: q.Get("state")}
	if f.State != "" && !bothy.ValidState(f.State) {
		return bothy.Errorf(bothy.EINVALID, "unknown state %q", f.State)
	}
	var err error
	if f.Offset, err = queryInt(r, "offset"); err != nil {
		return err
	} else if f.Limit, err = queryInt(r, "limit"); err != nil {
		return err
	} else if f.Owner, err = listOwner(p); err != nil {
		return err
	}
	cs, err := s.store.ListComputers(r.Context(), p.TenantID, f)
	if err != nil {
		return err
	}
	list := ComputerList{Computers: []*bothy.Computer{}}
	for _, c := range cs {
		list.Computers = append(list.Computers, c)
	}
	writeJSON(w, nethttp.StatusOK, list)
	return nil
}

func (s *Server) handleGetComputer(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	c, err := s.store.FindComputer(r.Context(), p.TenantID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, nethttp.StatusOK, c)
	return nil
}

// handleStopComputer stops a computer through the ComputeService. Without
// one every computer is cold, so stopping returns it unchanged; a destroyed
// one is ECONFLICT.
func (s *Server) handleStopComputer(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	if s.compute != nil {
		c, err := s.compute.StopComputer(r.Context(), p.TenantID, r.PathValue("id"))
		if err != nil {
			return err
		}
		writeJSON(w, nethttp.StatusOK, c)
		return nil
	}
	c, err := s.store.FindComputer(r.Context(), p.TenantID, r.PathValue("id"))
	if err != nil {
		return err
	} else if c.State == bothy.StateDestroyed {
		return bothy.Errorf(bothy.ECONFLICT, "computer %q is destroyed", c.ID)
	}
	writeJSON(w, nethttp.StatusOK, c)
	return nil
}

// handleDestroyComputer marks a computer destroyed, through the
// ComputeService if there is one (which stops it first): its files answer
// not_found from then on, and destroying it again returns it as is. Its
// packs are left to garbage collection.
func (s *Server) handleDestroyComputer(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	ctx, id := r.Context(), r.PathValue("id")
	if s.compute != nil {
		c, err := s.compute.DestroyComputer(ctx, p.TenantID, id)
		if err != nil {
			return err
		}
		writeJSON(w, nethttp.StatusOK, c)
		return nil
	}
	c, err := s.store.FindComputer(ctx, p.TenantID, id)
	if err != nil {
		return err
	}
	if c.State != bothy.StateDestroyed {
		if err := s.store.SetComputerState(ctx, p.TenantID, id, bothy.StateDestroyed); err != nil {
			return err
		}
		if c, err = s.store.FindComputer(ctx, p.TenantID, id); err != nil {
			return err
		}
	}
	writeJSON(w, nethttp.StatusOK, c)
	return nil
}

func (s *Server) handleListRevisions(w nethttp.ResponseWriter, r *nethttp.Request, p *bothy.Principal) error {
	ctx, id := r.Context(), r.PathValue("id")
	// The store lists nothing for a missing computer; the API says 404.
	if _, err := s.store.FindComputer(ctx, p.TenantID, id); err != nil {
		return err
	}
	offset, err := queryInt(r, "offset")
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		return err
	}
	revs, err := s.store.ListRevisions(ctx, p.TenantID, id, offset, limit)
	if err != nil {
		return err
	}
	if revs == nil {
		revs = []*bothy.Revision{}
	}
	writeJSON(w, nethttp.StatusOK, RevisionList{Revisions: revs})
	return nil
}
