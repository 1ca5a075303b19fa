package control

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/bothyhq/bothy"
)

// RunCommand implements bothy.ComputeService.
func (c *Controller) RunCommand(ctx context.Context, tenantID, computerID string, req bothy.RunRequest) (*bothy.Command, bool, error) {
	if err := req.Validate(); err != nil {
		return nil, false, err
	}
	// A run that gives no timeout gets the server's, which the wall
	// budgets may lower (bothy.AdmitRun).
	if req.TimeoutMS == 0 {
		req.TimeoutMS = c.cfg.CommandTimeout.Milliseconds()
	}
	comp, err := c.store.FindComputer(ctx, tenantID, computerID)
	if err != nil {
		return nil, false, err
	} else if comp.State == bothy.StateDestroyed {
		return nil, false, bothy.Errorf(bothy.ECONFLICT, "computer %q is destroyed", computerID)
	} else if _, ok := c.cfg.Profiles[comp.Profile]; !ok {
		return nil, false, bothy.Errorf(bothy.ECONFLICT, "no provider serves profile %q on this server", comp.Profile)
	} else if err := bothy.AdmitRun(comp, &req); err != nil {
		return nil, false, err
	} else if err := c.checkCommandLimits(comp, req.Limits); err != nil {
		return nil, false, err
	}
	cmd := &bothy.Command{
		ID: newID("cmd_"), TenantID: tenantID, ComputerID: computerID, IdempotencyKey: req.IdempotencyKey,
		WorkJobID: cmp.Or(req.WorkJobID, comp.WorkJobID), Argv: req.Argv, Script: req.Script, Cwd: req.Cwd, TimeoutMS: req.TimeoutMS,
		Secrets: req.Secrets, Limits: req.Limits, StdinBytes: int64(len(req.Stdin)),
	}
	if req.Authority != nil {
		cmd.AuthorityDigest = req.Authority.Digest()
	}
	for name := range req.Env {
		cmd.EnvNames = append(cmd.EnvNames, name)
	}
	slices.Sort(cmd.EnvNames)
	// The spec is kept before the command exists, so that a poll never
	// finds the command without it.
	spec := req.Spec()
	c.mu.Lock()
	c.specs[cmd.ID] = spec
	c.mu.Unlock()
	// On a sandbox that cannot keep commands apart, the check and the
	// command's creation are one step (admitShared).
	c.sharedMu.Lock()
	err = c.admitShared(ctx, comp, &req)
	created := false
	if err == nil {
		created, err = c.store.CreateCommand(ctx, cmd)
	}
	c.sharedMu.Unlock()
	if err != nil || !created {
		c.mu.Lock()
		delete(c.specs, cmd.ID)
		c.mu.Unlock()
		if err != nil {
			return nil, false, err
		}
		return cmd, false, nil
	}
	c.fault(faultAfterAdmit)
	if err := c.ensureLease(ctx, tenantID, computerID); err != nil {
		return nil, false, err
	}
	c.changed()
	return cmd, true, nil
}

// checkCommandLimits refuses a command's own limit above its lease's: the
// lease's limit would bound it anyway, and a CPU quota above the lease's
// is refused by the kernel.
func (c *Controller) checkCommandLimits(comp *bothy.Computer, l bothy.Limits) error {
	lease := c.cfg.Limits
	lease.ScratchBytes = bothy.ScratchBytes(comp, lease.ScratchBytes)
	for _, x := range []struct {
		name      string
		cmd, most int64
	}{{"memory_bytes", l.MemoryBytes, lease.MemoryBytes}, {"cpu_millis", l.CPUMillis, lease.CPUMillis},
		{"pids", l.Pids, lease.Pids}, {"scratch_bytes", l.ScratchBytes, lease.ScratchBytes}} {
		if x.most > 0 && x.cmd > x.most {
			return bothy.Errorf(bothy.EINVALID, "the command's limit %s %d is above its lease's, %d", x.name, x.cmd, x.most)
		}
	}
	return nil
}

// ensureLease starts a lease for the computer unless it has one.
func (c *Controller) ensureLease(ctx context.Context, tenantID, computerID string) error {
	for attempt := 0; attempt < 3; attempt++ {
		comp, err := c.store.FindComputer(ctx, tenantID, computerID)
		if err != nil {
			return err
		} else if comp.State == bothy.StateDestroyed {
			return nil
		}
		if _, err := c.store.ActiveLease(ctx, tenantID, computerID); err == nil {
			return nil
		} else if bothy.ErrorCode(err) != bothy.ENOTFOUND {
			return err
		}
		provider, ok := c.cfg.Profiles[comp.Profile]
		if !ok {
			return bothy.Errorf(bothy.ECONFLICT, "no provider serves profile %q on this server", comp.Profile)
		}
		now := c.now()
		l := &bothy.Lease{
			ID: newID("lse_"), TenantID: tenantID, ComputerID: computerID, Generation: comp.Generation + 1,
			Provider: provider, Host: c.pickAgent(now), CPUMillis: c.cfg.Limits.CPUMillis, MemoryBytes: c.cfg.Limits.MemoryBytes,
			ScratchBytes: bothy.ScratchBytes(comp, c.cfg.Limits.ScratchBytes),
			ExpiresAt:    now.Add(c.cfg.LeaseTTL),
		}
		if err := c.store.AcquireLease(ctx, l); err != nil {
			if bothy.ErrorCode(err) == bothy.ECONFLICT {
				continue // another caller started one, or the generation moved: look again
			}
			return err
		}
		c.mu.Lock()
		c.leases[l.ID] = &leaseState{id: l.ID, tenantID: tenantID, computerID: computerID, generation: l.Generation,
			provider: provider, agent: l.Host, lastUsed: now}
		delete(c.stops, computerID)
		c.mu.Unlock()
		c.log.Info("lease acquired", "computer", computerID, "lease", l.ID, "generation", l.Generation, "agent", l.Host)
		c.fault(faultAfterLease)
		c.changed()
		return nil
	}
	return bothy.Errorf(bothy.ECONFLICT, "computer %q changed while starting a lease; try again", computerID)
}

// pickAgent returns the recently polling agent holding the fewest leases,
// or "" for whichever agent polls first.
func (c *Controller) pickAgent(now time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	best, bestN := "", -1
	for id, seen := range c.agents {
		if now.Sub(seen) > agentFreshness {
			continue
		}
		n := 0
		for _, l := range c.leases {
			if l.agent == id {
				n++
			}
		}
		if bestN < 0 || n < bestN || n == bestN && id < best {
			best, bestN = id, n
		}
	}
	return best
}

// WaitCommand implements bothy.ComputeService.
func (c *Controller) WaitCommand(ctx context.Context, tenantID, commandID string) (*bothy.Command, error) {
	for {
		ch, release := c.watcher(commandID)
		cmd, err := c.store.FindCommand(ctx, tenantID, commandID)
		if err == nil && !bothy.CommandTerminal(cmd.State) {
			err = c.sleep(ctx, ch)
			cmd = nil
		}
		release()
		if err != nil {
			return nil, err
		} else if cmd != nil {
			return cmd, nil
		}
	}
}

// WaitEvents implements bothy.ComputeService.
func (c *Controller) WaitEvents(ctx context.Context, tenantID, commandID string, after int64) error {
	for {
		ch, release := c.watcher(commandID)
		cmd, err := c.store.FindCommand(ctx, tenantID, commandID)
		done := err == nil && (cmd.LastSeq > after || bothy.CommandTerminal(cmd.State))
		if err == nil && !done {
			err = c.sleep(ctx, ch)
		}
		release()
		if err != nil || done {
			return err
		}
	}
}

// sleep waits for ch, ctx, or a fallback wake-up (another replica may have
// written what the caller waits for).
func (c *Controller) sleep(ctx context.Context, ch <-chan struct{}) error {
	t := time.NewTimer(fallbackWakeup)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stopping:
		return errStopping
	}
	return nil
}

// CancelCommand implements bothy.ComputeService. A command not yet
// dispatched is cancelled at once; a dispatched or running one is killed
// by its runtime at its next poll, and the runtime reports it cancelled.
func (c *Controller) CancelCommand(ctx context.Context, tenantID, commandID string) (*bothy.Command, error) {
	cmd, err := c.store.FindCommand(ctx, tenantID, commandID)
	if err != nil {
		return nil, err
	} else if bothy.CommandTerminal(cmd.State) {
		return cmd, nil
	}
	if cmd.State == bothy.CommandAdmitted {
		got, err := c.transition(ctx, tenantID, commandID, []string{bothy.CommandAdmitted}, bothy.CommandCancelled, bothy.CommandUpdate{})
		if err == nil {
			c.forget(commandID)
			c.notify(commandID)
			return got, nil
		} else if bothy.ErrorCode(err) != bothy.ECONFLICT {
			return nil, err
		}
		// Dispatched meanwhile: cancel through the runtime.
	}
	c.mu.Lock()
	c.cancels[commandID] = true
	c.mu.Unlock()
	c.changed()
	return c.store.FindCommand(ctx, tenantID, commandID)
}

// forget drops what memory holds of a command.
func (c *Controller) forget(commandID string) {
	c.mu.Lock()
	delete(c.specs, commandID)
	delete(c.sentAt, commandID)
	delete(c.cancels, commandID)
	c.mu.Unlock()
}

// StopComputer implements bothy.ComputeService. Commands admitted but not
// yet dispatched are cancelled; running ones are cancelled by the
// runtime's teardown, which checkpoints the workspace before it releases
// the lease.
func (c *Controller) StopComputer(ctx context.Context, tenantID, computerID string) (*bothy.Computer, error) {
	comp, err := c.store.FindComputer(ctx, tenantID, computerID)
	if err != nil {
		return nil, err
	} else if comp.State == bothy.StateDestroyed {
		return nil, bothy.Errorf(bothy.ECONFLICT, "computer %q is destroyed", computerID)
	}
	if err := c.stop(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	return c.store.FindComputer(ctx, tenantID, computerID)
}

// stop asks the computer's lease, if any, to stop and waits until it is
// released.
func (c *Controller) stop(ctx context.Context, tenantID, computerID string) error {
	admitted, err := c.store.ListCommands(ctx, tenantID, bothy.CommandFilter{ComputerID: computerID, State: bothy.CommandAdmitted, Limit: 1000})
	if err != nil {
		return err
	}
	for _, cmd := range admitted {
		if _, err := c.transition(ctx, tenantID, cmd.ID, []string{bothy.CommandAdmitted}, bothy.CommandCancelled, bothy.CommandUpdate{}); err == nil {
			c.forget(cmd.ID)
			c.notify(cmd.ID)
		}
	}
	if _, err := c.store.ActiveLease(ctx, tenantID, computerID); bothy.ErrorCode(err) == bothy.ENOTFOUND {
		return nil
	} else if err != nil {
		return err
	}
	c.requestStop(ctx, tenantID, computerID)
	ctx, cancel := context.WithTimeout(ctx, stopWait)
	defer cancel()
	for {
		// A release calls changed, which closes the wake channel taken
		// before the check; the timer covers another replica's release.
		c.mu.Lock()
		wake := c.wake
		c.mu.Unlock()
		if _, err := c.store.ActiveLease(ctx, tenantID, computerID); bothy.ErrorCode(err) == bothy.ENOTFOUND {
			return nil
		} else if err != nil {
			return err
		}
		t := time.NewTimer(fallbackWakeup)
		select {
		case <-wake:
			t.Stop()
			continue
		case <-ctx.Done():
			t.Stop()
			return bothy.Errorf(bothy.ECONFLICT, "computer %q did not stop within %s; it is stopping", computerID, stopWait)
		case <-c.stopping:
			// The server stops before the lease was released: the
			// computer stays stopping, and the next server finishes it.
			t.Stop()
			return bothy.Errorf(bothy.EUNAVAILABLE, "the server is stopping before computer %q stopped; it is stopping, and stops when the server is back", computerID)
		case <-t.C:
		}
	}
}

// requestStop marks the computer stopping; its runtime tears the lease down
// at its next poll.
func (c *Controller) requestStop(ctx context.Context, tenantID, computerID string) {
	c.mu.Lock()
	c.stops[computerID] = true
	c.mu.Unlock()
	if err := c.store.SetComputerState(ctx, tenantID, computerID, bothy.StateStopping); err != nil {
		c.log.Warn("mark computer stopping", "computer", computerID, "err", err)
	}
	c.changed()
}

// DestroyComputer implements bothy.ComputeService.
func (c *Controller) DestroyComputer(ctx context.Context, tenantID, computerID string) (*bothy.Computer, error) {
	comp, err := c.store.FindComputer(ctx, tenantID, computerID)
	if err != nil {
		return nil, err
	} else if comp.State == bothy.StateDestroyed {
		return comp, nil
	}
	if err := c.stop(ctx, tenantID, computerID); err != nil {
		return nil, err
	}
	if err := c.store.SetComputerState(ctx, tenantID, computerID, bothy.StateDestroyed); err != nil {
		return nil, err
	}
	c.mu.Lock()
	delete(c.stops, computerID)
	c.mu.Unlock()
	return c.store.FindComputer(ctx, tenantID, computerID)
}

// Checkpoint implements bothy.ComputeService.
func (c *Controller) Checkpoint(ctx context.Context, tenantID, computerID string) (*bothy.Revision, error) {
	comp, err := c.store.FindComputer(ctx, tenantID, computerID)
	if err != nil {
		return nil, err
	}
	l := c.leaseOf(computerID)
	if l == nil || comp.State == bothy.StateCold || comp.State == bothy.StateDestroyed {
		return c.currentRevision(ctx, comp)
	}
	c.mu.Lock()
	l.ckptWanted++
	want := l.ckptWanted
	c.mu.Unlock()
	c.changed()
	ctx, cancel := context.WithTimeout(ctx, stopWait)
	defer cancel()
	for {
		c.mu.Lock()
		done, rev, msg := l.ckptDone, l.ckptRevision, l.ckptErr
		c.mu.Unlock()
		if done >= want {
			if msg != "" {
				return nil, bothy.Errorf(bothy.EINTERNAL, "checkpoint failed: %s", msg)
			} else if rev == 0 {
				// Nothing committed yet: revision 0, the empty workspace,
				// which the store does not hold.
				return c.currentRevision(ctx, comp)
			}
			return c.store.FindRevision(ctx, tenantID, computerID, rev)
		}
		if cur := c.leaseOf(computerID); cur != l {
			// The lease ended meanwhile; its teardown checkpointed.
			if comp, err = c.store.FindComputer(ctx, tenantID, computerID); err != nil {
				return nil, err
			}
			return c.currentRevision(ctx, comp)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (c *Controller) currentRevision(ctx context.Context, comp *bothy.Computer) (*bothy.Revision, error) {
	if comp.Revision == 0 {
		return &bothy.Revision{ComputerID: comp.ID, Number: 0, CreatedAt: comp.CreatedAt}, nil
	}
	return c.store.FindRevision(ctx, comp.TenantID, comp.ID, comp.Revision)
}

// leaseOf returns the lease state of the computer's unreleased lease that
// this controller knows, or nil.
func (c *Controller) leaseOf(computerID string) *leaseState {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.leases {
		if l.computerID == computerID {
			return l
		}
	}
	return nil
}
