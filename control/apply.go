package control

import (
	"context"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/runtime"
)

// applyReq is a files-API change waiting to be applied by a lease's
// runtime.
type applyReq struct {
	work *runtime.ApplyWork
	done chan struct{}
	rev  int64
	err  error
}

// commitThroughRuntime is the apply path of a change made through the
// files API to a running computer (files.commit): the change waits in the
// lease's applies until its agent polls, applies it to the runtime's disk
// and commits it through its lease (Applied), so the disk and the store
// never diverge. A lease that is not ready, or moved on to another
// generation, is ECONFLICT, and the change is re-run.
func (c *Controller) commitThroughRuntime(ctx context.Context, comp *bothy.Computer, req *bothy.CommitRequest) (*bothy.Revision, error) {
	l := c.leaseOf(comp.ID)
	c.mu.Lock()
	ready := l != nil && l.ready && l.tenantID == comp.TenantID && l.generation == comp.Generation
	c.mu.Unlock()
	if !ready {
		return nil, bothy.Errorf(bothy.ECONFLICT, "computer %q is %s; try again when it is active or cold", comp.ID, comp.State)
	}
	w := &runtime.ApplyWork{Base: req.Base, Root: req.RootDigest, Packs: req.Packs}
	if req.Base > 0 {
		base, err := c.store.FindRevision(ctx, comp.TenantID, comp.ID, req.Base)
		if err != nil {
			return nil, err
		}
		w.BaseRoot, w.BasePacks = base.RootDigest, base.Packs
	}
	a := &applyReq{work: w, done: make(chan struct{})}
	c.mu.Lock()
	c.applySeq++
	w.ID = c.applySeq
	l.applies = append(l.applies, a)
	c.mu.Unlock()
	c.changed()
	defer func() {
		c.mu.Lock()
		for i, x := range l.applies {
			if x == a {
				l.applies = append(l.applies[:i], l.applies[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
	}()
	t := time.NewTimer(stopWait)
	defer t.Stop()
	select {
	case <-a.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, bothy.Errorf(bothy.EUNAVAILABLE, "the computer's runtime did not apply the change within %s", stopWait)
	case <-c.stopping:
		return nil, errStopping
	}
	if a.err != nil {
		return nil, a.err
	}
	return c.store.FindRevision(ctx, comp.TenantID, comp.ID, a.rev)
}

// pendingApplies returns the lease's pending changes.
func (c *Controller) pendingApplies(l *leaseState) []*runtime.ApplyWork {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*runtime.ApplyWork
	for _, a := range l.applies {
		out = append(out, a.work)
	}
	return out
}

// Applied implements runtime.Control.
func (c *Controller) Applied(ctx context.Context, cred string, req *runtime.AppliedRequest) error {
	cl, err := c.claims(cred)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.leases[cl.LeaseID]
	if l == nil || l.generation != cl.Generation {
		return bothy.Errorf(bothy.ECONFLICT, "lease %q of generation %d is not running here", cl.LeaseID, cl.Generation)
	}
	for _, a := range l.applies {
		if a.work.ID == req.ID {
			select {
			case <-a.done:
			default:
				a.rev = req.Revision
				if req.Error != nil {
					a.err = req.Error
				}
				close(a.done)
			}
		}
	}
	return nil
}
