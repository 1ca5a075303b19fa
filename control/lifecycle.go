package control

import (
	"context"

	"github.com/bothyhq/bothy"
)

// reap releases, as lost, every lease whose runtime stopped heartbeating
// (its agent stopped polling for longer than the lease's TTL), and settles
// its commands: those that did not finish are lost, because the generation
// that could answer for them is gone.
func (c *Controller) reap(ctx context.Context) error {
	expired, err := c.store.ListExpiredLeases(ctx, c.now(), 100)
	if err != nil {
		return err
	}
	for _, l := range expired {
		err := c.store.ReleaseLease(ctx, l.TenantID, l.ID, l.Generation, bothy.LeaseLost, "")
		if err != nil && bothy.ErrorCode(err) != bothy.ECONFLICT {
			return err
		} else if err == nil {
			c.recordRelease(ctx, l.TenantID, l.ID, nil)
		}
		c.log.Warn("lease lost: its runtime stopped polling", "lease", l.ID, "computer", l.ComputerID, "expired", l.ExpiresAt)
		if err := c.afterRelease(ctx, l.TenantID, l.ComputerID, l.ID, l.Generation); err != nil {
			return err
		}
	}
	return nil
}

// stopIdle asks leases to stop that ran nothing for the idle timeout, or
// that are past their maximum lifetime.
func (c *Controller) stopIdle(ctx context.Context) {
	now := c.now()
	type cand struct {
		tenantID, computerID string
		lifetime             bool
	}
	var cands []cand
	c.mu.Lock()
	for _, l := range c.leases {
		if !l.ready || c.stops[l.computerID] {
			continue
		}
		if now.Sub(l.readyAt) > c.cfg.MaxLifetime {
			cands = append(cands, cand{l.tenantID, l.computerID, true})
		} else if now.Sub(l.lastUsed) > c.cfg.IdleTimeout {
			cands = append(cands, cand{l.tenantID, l.computerID, false})
		}
	}
	c.mu.Unlock()
	for _, k := range cands {
		if !k.lifetime {
			busy := false
			for _, state := range []string{bothy.CommandAdmitted, bothy.CommandDispatched, bothy.CommandMayHaveStarted, bothy.CommandRunning} {
				cmds, err := c.store.ListCommands(ctx, k.tenantID, bothy.CommandFilter{ComputerID: k.computerID, State: state, Limit: 1})
				if err != nil || len(cmds) > 0 {
					busy = true
					break
				}
			}
			if busy {
				continue
			}
		}
		c.log.Info("stopping computer", "computer", k.computerID, "reason", map[bool]string{true: "max lifetime", false: "idle"}[k.lifetime])
		c.requestStop(ctx, k.tenantID, k.computerID)
	}
}
