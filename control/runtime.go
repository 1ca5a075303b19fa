package control

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"strings"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
)

// Poll implements runtime.Control: it heartbeats the leases the agent
// holds, adopts those it knew nothing of (after a restart of either side),
// and answers the desired state of every lease assigned to the agent.
func (c *Controller) Poll(ctx context.Context, agentToken string, req *runtime.PollRequest) (*runtime.PollResponse, error) {
	if err := bothy.ValidateID("agent id", req.AgentID); err != nil {
		return nil, err
	} else if err := c.authAgent(ctx, agentToken, req.AgentID); err != nil {
		return nil, err
	}
	c.mu.Lock()
	_, seen := c.agents[req.AgentID]
	c.agents[req.AgentID] = c.now()
	version, wake := c.version, c.wake
	c.mu.Unlock()
	for _, h := range req.Leases {
		if err := c.adopt(ctx, req.AgentID, h); err != nil {
			return nil, err
		}
	}
	if !seen {
		if err := c.releaseUnheld(ctx, req); err != nil {
			// Tried again at the agent's next poll.
			c.mu.Lock()
			delete(c.agents, req.AgentID)
			c.mu.Unlock()
			return nil, err
		}
	}
	if req.Version >= version && req.Wait > 0 {
		wait := min(req.Wait, maxPollWait)
		t := time.NewTimer(wait)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-c.stopping:
			t.Stop()
			return nil, errStopping
		}
		t.Stop()
	}
	c.mu.Lock()
	version = c.version
	var mine []*leaseState
	for _, l := range c.leases {
		if l.agent == "" {
			l.agent = req.AgentID
		}
		if l.agent == req.AgentID {
			mine = append(mine, l)
		}
	}
	c.mu.Unlock()
	resp := &runtime.PollResponse{Version: version, Leases: []*runtime.LeaseWork{}}
	for _, l := range mine {
		w, err := c.leaseWork(ctx, l)
		if err != nil {
			return nil, err
		} else if w != nil {
			resp.Leases = append(resp.Leases, w)
		}
	}
	return resp, nil
}

// hashKey returns the tenant's checkpoint key, which never changes, reading
// it once per tenant.
func (c *Controller) hashKey(ctx context.Context, tenantID string) ([]byte, error) {
	c.mu.Lock()
	key, ok := c.hashKeys[tenantID]
	c.mu.Unlock()
	if ok {
		return key, nil
	}
	t, err := c.store.FindTenant(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.hashKeys[tenantID] = t.HashKey
	c.mu.Unlock()
	return t.HashKey, nil
}

// adopt registers a lease an agent reports holding if it is the unreleased
// lease of its generation; anything else the agent tears down, because the
// answer will not list it.
func (c *Controller) adopt(ctx context.Context, agent string, h runtime.HeldLease) error {
	c.mu.Lock()
	_, known := c.leases[h.LeaseID]
	c.mu.Unlock()
	if known {
		return nil
	}
	l, err := c.store.FindLease(ctx, h.TenantID, h.LeaseID)
	if bothy.ErrorCode(err) == bothy.ENOTFOUND {
		return nil
	} else if err != nil {
		return err
	} else if !l.ReleasedAt.IsZero() || l.Generation != h.Generation {
		return nil
	}
	comp, err := c.store.FindComputer(ctx, l.TenantID, l.ComputerID)
	if err != nil {
		return err
	}
	// A lease its agent is still starting or resuming takes no command
	// (the agent would drop it) until the agent reports it Ready.
	ready := (comp.State == bothy.StateActive || comp.State == bothy.StateStopping) && !h.Starting
	now := c.now()
	c.mu.Lock()
	if _, known := c.leases[h.LeaseID]; !known {
		c.leases[l.ID] = &leaseState{id: l.ID, tenantID: l.TenantID, computerID: l.ComputerID, generation: l.Generation,
			provider: l.Provider, agent: agent, ready: ready, readyAt: now, lastUsed: now}
		if comp.State == bothy.StateStopping {
			c.stops[l.ComputerID] = true
		}
	}
	c.mu.Unlock()
	c.log.Info("lease adopted from agent", "lease", l.ID, "agent", agent, "ready", ready)
	return nil
}

// releaseUnheld settles, at an agent's first poll to this process, the
// leases an earlier process assigned to it that it does not hold: it was
// never told of them (the process died first), or it tore them down and
// could not report it. Its poll lists every lease it holds, those still
// starting and those it found on disk, so the others are gone: each is
// released as lost now, rather than when its TTL runs out, and its
// admitted commands start a lease of the next generation. A lease of
// another agent, one this process knows, or one reserved since this
// process started is left alone; so is a lease assigned to no agent (none
// had polled when it was reserved), which keeps its TTL.
func (c *Controller) releaseUnheld(ctx context.Context, req *runtime.PollRequest) error {
	held := map[string]bool{}
	for _, h := range req.Leases {
		held[h.LeaseID] = true
	}
	// Every unreleased lease has an expiry, so at a time past them all the
	// reaper's query lists every unreleased lease (the first 1000: those
	// beyond keep their TTL).
	leases, err := c.store.ListExpiredLeases(ctx, c.now().Add(unreleasedHorizon), 1000)
	if err != nil {
		return err
	}
	for _, l := range leases {
		c.mu.Lock()
		_, known := c.leases[l.ID]
		c.mu.Unlock()
		if l.Host != req.AgentID || held[l.ID] || known || !l.ReservedAt.Before(c.started.Truncate(time.Microsecond)) {
			continue
		}
		err := c.store.ReleaseLease(ctx, l.TenantID, l.ID, l.Generation, bothy.LeaseLost, "")
		if bothy.ErrorCode(err) == bothy.ECONFLICT {
			continue // released meanwhile
		} else if err != nil {
			return err
		}
		c.recordRelease(ctx, l.TenantID, l.ID, nil)
		c.log.Warn("lease lost: its agent does not hold it after a restart", "lease", l.ID, "computer", l.ComputerID, "agent", req.AgentID)
		if err := c.afterRelease(ctx, l.TenantID, l.ComputerID, l.ID, l.Generation); err != nil {
			return err
		}
	}
	return nil
}

// leaseWork computes one lease's desired state, dispatching its admitted
// commands. A lease that is no longer unreleased at its generation is
// dropped and gets no entry (its agent tears it down).
func (c *Controller) leaseWork(ctx context.Context, l *leaseState) (*runtime.LeaseWork, error) {
	now := c.now()
	if err := c.store.HeartbeatLease(ctx, l.tenantID, l.id, l.generation, now.Add(c.cfg.LeaseTTL)); bothy.ErrorCode(err) == bothy.ECONFLICT || bothy.ErrorCode(err) == bothy.ENOTFOUND {
		c.dropLease(l.id)
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	comp, err := c.store.FindComputer(ctx, l.tenantID, l.computerID)
	if err != nil {
		return nil, err
	}
	hashKey, err := c.hashKey(ctx, l.tenantID)
	if err != nil {
		return nil, err
	}
	expires := now.Add(runtime.DefaultCredentialTTL)
	c.mu.Lock()
	stop := c.stops[l.computerID]
	ready, ckpt := l.ready, l.ckptWanted
	c.mu.Unlock()
	w := &runtime.LeaseWork{
		LeaseID: l.id, TenantID: l.tenantID, ComputerID: l.computerID, Generation: l.generation, Provider: l.provider,
		Credential: c.signer.Sign(runtime.Claims{TenantID: l.tenantID, ComputerID: l.computerID, LeaseID: l.id,
			Generation: l.generation, Expires: expires}),
		CredentialExpires: expires, HashKey: hashKey, Revision: comp.Revision, Limits: c.cfg.Limits, Egress: comp.Egress,
		Stop: stop || comp.State == bothy.StateStopping || comp.State == bothy.StateDestroyed, Checkpoint: ckpt,
	}
	w.Limits.ScratchBytes = bothy.ScratchBytes(comp, c.cfg.Limits.ScratchBytes)
	if comp.Revision > 0 {
		// Revisions never change: the lease keeps the last one it was
		// sent, and only a new revision is read (polls are frequent).
		c.mu.Lock()
		rev := l.rev
		c.mu.Unlock()
		if rev == nil || rev.Number != comp.Revision {
			if rev, err = c.store.FindRevision(ctx, l.tenantID, l.computerID, comp.Revision); err != nil {
				return nil, err
			}
			c.mu.Lock()
			l.rev = rev
			c.mu.Unlock()
		}
		w.RootDigest, w.Packs, w.Size, w.FileCount = rev.RootDigest, rev.Packs, rev.Size, rev.FileCount
	}
	if !ready {
		return w, nil
	}
	if !w.Stop {
		w.Applies = c.pendingApplies(l)
	}
	for _, state := range []string{bothy.CommandAdmitted, bothy.CommandDispatched, bothy.CommandMayHaveStarted, bothy.CommandRunning} {
		cmds, err := c.store.ListCommands(ctx, l.tenantID, bothy.CommandFilter{ComputerID: l.computerID, State: state, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, cmd := range cmds {
			cw, err := c.commandWork(ctx, l, cmd, w.Stop)
			if err != nil {
				return nil, err
			} else if cw != nil {
				w.Commands = append(w.Commands, cw...)
			}
		}
	}
	return w, nil
}

// authAgent accepts the server's own agent token (Config.AgentToken, for
// its in-process agent and agents it trusts), for any agent id, or a
// token of the store whose only scope is agent:ID, for that id alone:
// such a token expires and can be revoked, and cannot poll as another
// agent to take its leases.
func (c *Controller) authAgent(ctx context.Context, token, agentID string) error {
	if c.cfg.AgentToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(c.cfg.AgentToken)) == 1 {
		return nil
	}
	if strings.HasPrefix(token, bothy.TokenPrefix) {
		p, err := c.store.ResolveToken(ctx, token)
		if err == nil && bothy.AgentOf(p.Scopes) == agentID {
			return nil
		} else if err == nil && bothy.AgentOf(p.Scopes) != "" {
			return bothy.Errorf(bothy.EUNAUTHORIZED, "this agent token is for agent %q, not %q", bothy.AgentOf(p.Scopes), agentID)
		}
	}
	return bothy.Errorf(bothy.EUNAUTHORIZED, "agent token is not valid")
}

// AuthenticateAgent implements runtime.Authenticator: the server's agent
// token, or a token of the store for some agent (Poll checks which).
func (c *Controller) AuthenticateAgent(ctx context.Context, token string) error {
	if c.cfg.AgentToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(c.cfg.AgentToken)) == 1 {
		return nil
	}
	if strings.HasPrefix(token, bothy.TokenPrefix) {
		if p, err := c.store.ResolveToken(ctx, token); err == nil && bothy.AgentOf(p.Scopes) != "" {
			return nil
		}
	}
	return bothy.Errorf(bothy.EUNAUTHORIZED, "agent token is not valid")
}

// AuthenticateLease implements runtime.Authenticator.
func (c *Controller) AuthenticateLease(ctx context.Context, cred string) error {
	_, err := c.claims(cred)
	return err
}

// withSecrets returns spec with the values of the command's secrets, read
// now from the secret service: they go to the runtime in the run action
// and are kept nowhere by the control plane. A secret that cannot be read
// fails the command with the reason.
func (c *Controller) withSecrets(ctx context.Context, cmd *bothy.Command, spec *bothy.RunSpec) (*bothy.RunSpec, error) {
	if len(cmd.Secrets) == 0 {
		return spec, nil
	} else if c.cfg.Secrets == nil {
		return nil, bothy.Errorf(bothy.EUNAVAILABLE, "this server has no secret store")
	}
	out := *spec
	out.Secrets, out.SecretFiles = map[string]string{}, map[string]string{}
	for _, ref := range cmd.Secrets {
		v, err := c.cfg.Secrets.Secret(ctx, cmd.TenantID, ref.Name)
		if err != nil {
			return nil, bothy.Errorf(bothy.ErrorCode(err), "secret %q: %s", ref.Name, bothy.ErrorMessage(err))
		}
		if ref.File {
			out.SecretFiles[ref.Env] = string(v)
		} else {
			out.Secrets[ref.Env] = string(v)
		}
	}
	return &out, nil
}

// commandWork decides what the lease's runtime must do about cmd.
func (c *Controller) commandWork(ctx context.Context, l *leaseState, cmd *bothy.Command, stopping bool) ([]*runtime.CommandWork, error) {
	c.mu.Lock()
	cancel, spec, sent, draining := c.cancels[cmd.ID], c.specs[cmd.ID], c.sentAt[cmd.ID], l.draining
	c.mu.Unlock()
	switch cmd.State {
	case bothy.CommandAdmitted:
		if stopping || draining {
			return nil, nil // the next lease runs it
		}
		if spec == nil {
			spec = &bothy.RunSpec{Argv: cmd.Argv, Script: cmd.Script, Cwd: cmd.Cwd, TimeoutMS: cmd.TimeoutMS, Limits: cmd.Limits}
			// Environment values and stdin are never stored; they died
			// with the process that admitted the command, which must not
			// run without them.
			if len(cmd.EnvNames) > 0 {
				c.finishFailed(ctx, cmd, []string{bothy.CommandAdmitted}, "the server restarted before dispatch and environment values are not kept; run it again")
				return nil, nil
			} else if cmd.StdinBytes > 0 {
				c.finishFailed(ctx, cmd, []string{bothy.CommandAdmitted}, "the server restarted before dispatch and stdin is not kept; run it again")
				return nil, nil
			}
		}
		spec, err := c.withSecrets(ctx, cmd, spec)
		if err != nil {
			c.finishFailed(ctx, cmd, []string{bothy.CommandAdmitted}, err.Error())
			return nil, nil
		}
		if _, err := c.store.DispatchCommand(ctx, l.tenantID, cmd.ID, l.id, l.generation); bothy.ErrorCode(err) == bothy.ECONFLICT {
			return nil, nil // another poll dispatched it, or it was cancelled
		} else if err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.sentAt[cmd.ID] = c.now()
		delete(c.specs, cmd.ID)
		l.lastUsed = c.now()
		c.mu.Unlock()
		c.fault(faultAfterDispatch)
		return []*runtime.CommandWork{{CommandID: cmd.ID, Action: runtime.ActRun, Spec: spec}}, nil
	case bothy.CommandDispatched:
		if cmd.Generation != l.generation {
			return nil, nil
		}
		if !sent.IsZero() && c.now().Sub(sent) < c.cfg.AckTimeout {
			return nil, nil // the runtime has it; its acknowledgement is on the way
		}
		if _, err := c.store.TransitionCommand(ctx, l.tenantID, cmd.ID, []string{bothy.CommandDispatched}, bothy.CommandMayHaveStarted, bothy.CommandUpdate{}); err != nil && bothy.ErrorCode(err) != bothy.ECONFLICT {
			return nil, err
		}
		return []*runtime.CommandWork{{CommandID: cmd.ID, Action: runtime.ActStatus}}, nil
	case bothy.CommandMayHaveStarted:
		if cmd.Generation != l.generation {
			return nil, nil
		}
		return []*runtime.CommandWork{{CommandID: cmd.ID, Action: runtime.ActStatus}}, nil
	case bothy.CommandRunning:
		if cmd.Generation != l.generation {
			return nil, nil
		}
		out := []*runtime.CommandWork{{CommandID: cmd.ID, Action: runtime.ActAttach, AfterSeq: cmd.LastSeq}}
		if cancel {
			out = append(out, &runtime.CommandWork{CommandID: cmd.ID, Action: runtime.ActCancel})
		}
		return out, nil
	}
	return nil, nil
}

// finishFailed moves a command to failed, via running where the states
// require it, recording why as a state event and as its Error.
func (c *Controller) finishFailed(ctx context.Context, cmd *bothy.Command, from []string, reason string) {
	fields, _ := json.Marshal(map[string]string{"state": bothy.CommandFailed, "error": reason})
	if err := c.store.AppendEvents(ctx, cmd.TenantID, cmd.ID, 0, []bothy.Event{{Kind: bothy.EventState, Fields: string(fields)}}); err != nil {
		c.log.Warn("record failure event", "command", cmd.ID, "err", err)
	}
	if _, err := c.transition(ctx, cmd.TenantID, cmd.ID, from, bothy.CommandFailed, bothy.CommandUpdate{Error: reason}); err != nil {
		c.log.Warn("fail command", "command", cmd.ID, "err", err)
	}
	c.forget(cmd.ID)
	c.notify(cmd.ID)
}

func (c *Controller) dropLease(id string) {
	c.mu.Lock()
	delete(c.leases, id)
	c.mu.Unlock()
}

// claims verifies a lease credential and returns its claims. It neither
// reads nor adopts the lease's state: each caller finds the lease itself.
func (c *Controller) claims(cred string) (*runtime.Claims, error) {
	return c.signer.Verify(cred, c.now())
}

// Ready implements runtime.Control.
func (c *Controller) Ready(ctx context.Context, cred string, req *runtime.ReadyRequest) error {
	cl, err := c.claims(cred)
	if err != nil {
		return err
	}
	if err := c.store.HeartbeatLease(ctx, cl.TenantID, cl.LeaseID, cl.Generation, c.now().Add(c.cfg.LeaseTTL)); err != nil {
		return err
	}
	c.mu.Lock()
	l := c.leases[cl.LeaseID]
	stop := c.stops[cl.ComputerID]
	if l != nil {
		l.ready, l.readyAt, l.lastUsed = true, c.now(), c.now()
	}
	c.mu.Unlock()
	if l == nil {
		return bothy.Errorf(bothy.ENOTFOUND, "lease %q is not known; poll again", cl.LeaseID)
	}
	state := bothy.StateActive
	if stop {
		state = bothy.StateStopping
	}
	if err := c.store.SetComputerState(ctx, cl.TenantID, cl.ComputerID, state); err != nil {
		return err
	}
	c.log.Info("lease ready", "lease", cl.LeaseID, "computer", cl.ComputerID, "host", req.Host)
	c.changed()
	return nil
}

// Released implements runtime.Control: the lease is torn down; commands
// of its generation that did not finish are lost, and admitted commands
// start a new lease.
func (c *Controller) Released(ctx context.Context, cred string, req *runtime.ReleaseRequest) error {
	cl, err := c.claims(cred)
	if err != nil {
		return err
	}
	if !bothy.ValidDisposition(req.Disposition) {
		return bothy.Errorf(bothy.EINVALID, "unknown disposition %q", req.Disposition)
	}
	usage := req.Usage
	if err := c.store.ReleaseLease(ctx, cl.TenantID, cl.LeaseID, cl.Generation, req.Disposition, req.Residue); err != nil {
		if bothy.ErrorCode(err) != bothy.ECONFLICT {
			return err
		}
		l, ferr := c.store.FindLease(ctx, cl.TenantID, cl.LeaseID)
		if ferr != nil || l.ReleasedAt.IsZero() {
			return err
		}
		// Released already: the answer to an earlier report was lost.
		// Only the report that released the lease charges its usage.
		usage = nil
	}
	c.recordRelease(ctx, cl.TenantID, cl.LeaseID, usage)
	c.log.Info("lease released", "lease", cl.LeaseID, "computer", cl.ComputerID, "disposition", req.Disposition, "error", req.Error)
	if req.Disposition == bothy.LeaseFailed {
		// The sandbox never became ready: the commands waiting for it fail
		// with the reason, rather than start lease after failing lease.
		admitted, err := c.store.ListCommands(ctx, cl.TenantID, bothy.CommandFilter{ComputerID: cl.ComputerID, State: bothy.CommandAdmitted, Limit: 1000})
		if err != nil {
			return err
		}
		for _, cmd := range admitted {
			c.finishFailed(ctx, cmd, []string{bothy.CommandAdmitted}, "the computer could not start: "+req.Error)
		}
	}
	return c.afterRelease(ctx, cl.TenantID, cl.ComputerID, cl.LeaseID, cl.Generation)
}

// chargeUnattributed charges the computer with what its lease's sandbox
// consumed beyond its commands' usage: processes that outlived their
// command, which no command's usage shows, and would otherwise escape the
// CPU budget. It returns what it charged: nothing if there was nothing
// beyond, or if the charge failed.
func (c *Controller) chargeUnattributed(ctx context.Context, l *bothy.Lease, charged, total bothy.Usage) bothy.Usage {
	tenantID, computerID, leaseID := l.TenantID, l.ComputerID, l.ID
	extra := bothy.Usage{CPUMicros: total.CPUMicros - charged.CPUMicros, PeakMemoryBytes: total.PeakMemoryBytes}
	if extra.CPUMicros <= 0 && extra.PeakMemoryBytes <= charged.PeakMemoryBytes {
		return bothy.Usage{}
	}
	extra.CPUMicros = max(0, extra.CPUMicros)
	if err := c.store.AddComputerUsage(ctx, tenantID, computerID, extra); err != nil {
		c.log.Warn("charge the lease's unattributed usage", "lease", leaseID, "err", err)
		return bothy.Usage{}
	}
	c.log.Info("lease usage beyond its commands'", "lease", leaseID, "cpu_us", extra.CPUMicros)
	return extra
}

// afterRelease settles what a released lease leaves: its unfinished
// commands are lost, and admitted ones get a new lease.
func (c *Controller) afterRelease(ctx context.Context, tenantID, computerID, leaseID string, generation int64) error {
	c.dropLease(leaseID)
	c.mu.Lock()
	delete(c.stops, computerID)
	c.mu.Unlock()
	for _, state := range []string{bothy.CommandDispatched, bothy.CommandMayHaveStarted, bothy.CommandRunning} {
		cmds, err := c.store.ListCommands(ctx, tenantID, bothy.CommandFilter{ComputerID: computerID, State: state, Limit: 1000})
		if err != nil {
			return err
		}
		for _, cmd := range cmds {
			if cmd.Generation != generation {
				continue
			}
			from := []string{cmd.State}
			if cmd.State == bothy.CommandDispatched {
				if _, err := c.store.TransitionCommand(ctx, tenantID, cmd.ID, from, bothy.CommandMayHaveStarted, bothy.CommandUpdate{}); err != nil {
					continue
				}
				from = []string{bothy.CommandMayHaveStarted}
			}
			fields, _ := json.Marshal(map[string]string{"state": bothy.CommandLost, "reason": "its lease ended before it finished"})
			c.store.AppendEvents(ctx, tenantID, cmd.ID, 0, []bothy.Event{{Kind: bothy.EventState, Fields: string(fields)}})
			if _, err := c.transition(ctx, tenantID, cmd.ID, from, bothy.CommandLost, bothy.CommandUpdate{Error: "its lease ended before it finished"}); err != nil && bothy.ErrorCode(err) != bothy.ECONFLICT {
				return err
			}
			c.forget(cmd.ID)
			c.notify(cmd.ID)
		}
	}
	admitted, err := c.store.ListCommands(ctx, tenantID, bothy.CommandFilter{ComputerID: computerID, State: bothy.CommandAdmitted, Limit: 1})
	if err != nil {
		return err
	}
	if len(admitted) > 0 {
		if err := c.ensureLease(ctx, tenantID, computerID); err != nil {
			c.log.Warn("start a lease for admitted commands", "computer", computerID, "err", err)
		}
	}
	c.changed()
	return nil
}

// Commit implements runtime.Control: a compare-and-swap fenced by the
// credential's lease and generation.
func (c *Controller) Commit(ctx context.Context, cred string, req *runtime.CommitRequest) (*bothy.Revision, error) {
	cl, err := c.claims(cred)
	if err != nil {
		return nil, err
	}
	return c.store.CommitRevision(ctx, &bothy.CommitRequest{
		TenantID: cl.TenantID, ComputerID: cl.ComputerID, Generation: cl.Generation, Base: req.Base,
		RootDigest: req.RootDigest, Packs: req.Packs, Size: req.Size, FileCount: req.FileCount,
		CreatedBy: cl.LeaseID, LeaseID: cl.LeaseID,
	})
}

// Checkpointed implements runtime.Control.
func (c *Controller) Checkpointed(ctx context.Context, cred string, req *runtime.CheckpointedRequest) error {
	cl, err := c.claims(cred)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.leases[cl.LeaseID]; l != nil && l.generation == cl.Generation && req.Checkpoint > l.ckptDone {
		l.ckptDone, l.ckptRevision, l.ckptErr = req.Checkpoint, req.Revision, req.Error
	}
	return nil
}

// command finds a command of the credential's computer.
func (c *Controller) command(ctx context.Context, cl *runtime.Claims, id string) (*bothy.Command, error) {
	cmd, err := c.store.FindCommand(ctx, cl.TenantID, id)
	if err != nil {
		return nil, err
	} else if cmd.ComputerID != cl.ComputerID {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "command %q not found", id)
	}
	return cmd, nil
}

// AppendEvents implements runtime.Control.
func (c *Controller) AppendEvents(ctx context.Context, cred, commandID string, events []bothy.Event) (*runtime.EventsResponse, error) {
	cl, err := c.claims(cred)
	if err != nil {
		return nil, err
	}
	if _, err := c.command(ctx, cl, commandID); err != nil {
		return nil, err
	}
	if len(events) > 0 {
		if err := c.store.AppendEvents(ctx, cl.TenantID, commandID, cl.Generation, events); err != nil {
			return nil, err
		}
		c.notify(commandID)
	}
	cmd, err := c.store.FindCommand(ctx, cl.TenantID, commandID)
	if err != nil {
		return nil, err
	}
	return &runtime.EventsResponse{LastSeq: cmd.LastSeq}, nil
}

// Report implements runtime.Control: it moves the command to the state the
// runtime reports, fenced by the credential's generation.
func (c *Controller) Report(ctx context.Context, cred, commandID string, r *runtime.Report) error {
	cl, err := c.claims(cred)
	if err != nil {
		return err
	}
	cmd, err := c.command(ctx, cl, commandID)
	if err != nil {
		return err
	} else if cmd.Generation != cl.Generation {
		return bothy.Errorf(bothy.ECONFLICT, "command %q was dispatched at generation %d, not %d", commandID, cmd.Generation, cl.Generation)
	}
	if l, err := c.store.FindLease(ctx, cl.TenantID, cl.LeaseID); err != nil {
		return err
	} else if !l.ReleasedAt.IsZero() || l.Generation != cl.Generation {
		return bothy.Errorf(bothy.ECONFLICT, "lease %q of generation %d is released: its runtime is stale", cl.LeaseID, cl.Generation)
	}
	defer c.notify(commandID)
	switch r.State {
	case bothy.RunRunning:
		c.fault(faultBeforeRunReply)
		if bothy.CommandTerminal(cmd.State) {
			return nil
		}
		return c.toRunning(ctx, cl, cmd)
	case bothy.RunNeverSeen:
		return c.neverSeen(ctx, cl, cmd)
	case bothy.RunFinished, bothy.RunFailed, bothy.RunLost:
		return c.ended(ctx, cl, cmd, r)
	}
	return bothy.Errorf(bothy.EINVALID, "unknown reported state %q", r.State)
}

// toRunning moves a dispatched command to running on its runtime's word,
// unless it runs already.
func (c *Controller) toRunning(ctx context.Context, cl *runtime.Claims, cmd *bothy.Command) error {
	if cmd.State == bothy.CommandRunning {
		return nil
	}
	_, err := c.store.TransitionCommand(ctx, cl.TenantID, cmd.ID, []string{bothy.CommandDispatched, bothy.CommandMayHaveStarted}, bothy.CommandRunning, bothy.CommandUpdate{Generation: cl.Generation})
	return err
}

// neverSeen takes the runtime's word that it never saw the command: it did
// not start, and goes back to admitted to be dispatched once more.
func (c *Controller) neverSeen(ctx context.Context, cl *runtime.Claims, cmd *bothy.Command) error {
	if cmd.State == bothy.CommandDispatched {
		// Sent to run and refused unseen: the runtime is tearing the
		// lease down. It gets nothing more to run.
		c.mu.Lock()
		if l := c.leases[cl.LeaseID]; l != nil {
			l.draining = true
		}
		c.mu.Unlock()
		if _, err := c.store.TransitionCommand(ctx, cl.TenantID, cmd.ID, []string{bothy.CommandDispatched}, bothy.CommandMayHaveStarted, bothy.CommandUpdate{}); err != nil {
			return err
		}
		cmd.State = bothy.CommandMayHaveStarted
	}
	if cmd.State != bothy.CommandMayHaveStarted {
		return bothy.Errorf(bothy.ECONFLICT, "command %q is %s, not may_have_started", cmd.ID, cmd.State)
	}
	if _, err := c.store.TransitionCommand(ctx, cl.TenantID, cmd.ID, []string{bothy.CommandMayHaveStarted}, bothy.CommandAdmitted, bothy.CommandUpdate{Generation: cl.Generation}); err != nil {
		return err
	}
	c.log.Info("command never reached its runtime; it will be dispatched once more", "command", cmd.ID)
	c.changed()
	return nil
}

// ended records the command's end as the runtime reports it, once every
// event up to r.LastSeq is stored; a command that ended already is left
// as it is.
func (c *Controller) ended(ctx context.Context, cl *runtime.Claims, cmd *bothy.Command, r *runtime.Report) error {
	if bothy.CommandTerminal(cmd.State) {
		return nil
	} else if cmd.LastSeq < r.LastSeq {
		return bothy.Errorf(bothy.ECONFLICT, "command %q has events up to %d stored, not %d; send them first", cmd.ID, cmd.LastSeq, r.LastSeq)
	}
	if err := c.toRunning(ctx, cl, cmd); err != nil {
		return err
	}
	to, u := endState(r)
	u.Generation = cl.Generation
	if _, err := c.transition(ctx, cl.TenantID, cmd.ID, []string{bothy.CommandRunning}, to, u); err != nil {
		return err
	}
	c.forget(cmd.ID)
	c.mu.Lock()
	if l := c.leases[cl.LeaseID]; l != nil {
		l.lastUsed = c.now()
	}
	c.mu.Unlock()
	return nil
}

// endState returns the command state that an end report means, and what
// the report says of the end: lost; completed, cancelled or timed_out with
// a finished report's exit, or failed with it when its output found no
// room on the runtime's disk (disk_full); failed otherwise.
func endState(r *runtime.Report) (string, bothy.CommandUpdate) {
	u := bothy.CommandUpdate{RevisionAfter: r.RevisionAfter, OutputDigest: r.OutputDigest}
	if r.State == bothy.RunLost {
		u.Error = r.Error
		return bothy.CommandLost, u
	} else if r.State != bothy.RunFinished || r.Exit == nil {
		u.Error = r.Error
		return bothy.CommandFailed, u
	}
	code, use := r.Exit.ExitCode, r.Exit.Usage
	u.ExitCode, u.Signal, u.DurationMS = &code, r.Exit.Signal, r.Exit.Duration.Milliseconds()
	u.Usage, u.OOMKilled, u.PidsLimited, u.DiskLimited = &use, r.Exit.OOMKilled, r.Exit.PidsLimited, r.Exit.DiskLimited
	u.DiskFull = r.Exit.DiskFull
	u.SandboxLost = r.Exit.SandboxLost
	switch {
	case r.Exit.DiskFull:
		// Its output is incomplete: it did not complete, whatever it
		// exited with.
		return bothy.CommandFailed, u
	case r.Exit.TimedOut:
		return bothy.CommandTimedOut, u
	case r.Exit.Cancelled:
		return bothy.CommandCancelled, u
	}
	return bothy.CommandCompleted, u
}
