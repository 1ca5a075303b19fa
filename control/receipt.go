package control

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/receipt"
)

var _ bothy.ReceiptIssuer = (*Controller)(nil)

// recordRelease charges and issues the receipt of a lease that was just
// released (Released, or the reaper, released it in the store).
//
// total, if set, is what the lease's sandbox consumed in all, as its
// runtime reported with the release: the computer is charged what its
// commands were not (chargeUnattributed), and the receipt states what the
// computer was charged for the lease, its commands' usage and that.
func (c *Controller) recordRelease(ctx context.Context, tenantID, leaseID string, total *bothy.Usage) {
	l, err := c.store.FindLease(ctx, tenantID, leaseID)
	var use bothy.Usage
	if err == nil {
		use, err = c.leaseUsage(ctx, l)
	}
	if err == nil && total != nil {
		use.Add(c.chargeUnattributed(ctx, l, use, *total))
	}
	if err == nil {
		_, err = c.issueLease(ctx, l, &use)
	}
	if err != nil {
		c.log.Warn("issue lease receipt", "lease", leaseID, "err", err)
	}
}

// ReceiptKey implements bothy.ReceiptIssuer.
func (c *Controller) ReceiptKey() *bothy.ReceiptKey { return c.receipts.Published() }

// CommandReceipt implements bothy.ReceiptIssuer.
func (c *Controller) CommandReceipt(ctx context.Context, tenantID, commandID string) (*bothy.Receipt, error) {
	if r, err := c.store.FindReceipt(ctx, tenantID, bothy.ReceiptCommand, commandID); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		return r, err
	}
	cmd, err := c.store.FindCommand(ctx, tenantID, commandID)
	if err != nil {
		return nil, err
	} else if !bothy.CommandTerminal(cmd.State) {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "command %q is %s: it has a receipt once it has ended", commandID, cmd.State)
	}
	return c.issueCommand(ctx, cmd)
}

// LeaseReceipt implements bothy.ReceiptIssuer.
func (c *Controller) LeaseReceipt(ctx context.Context, tenantID, leaseID string) (*bothy.Receipt, error) {
	if r, err := c.store.FindReceipt(ctx, tenantID, bothy.ReceiptLease, leaseID); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		return r, err
	}
	l, err := c.store.FindLease(ctx, tenantID, leaseID)
	if err != nil {
		return nil, err
	} else if l.ReleasedAt.IsZero() {
		return nil, bothy.Errorf(bothy.ENOTFOUND, "lease %q is held: it has a receipt once it is released", leaseID)
	}
	return c.issueLease(ctx, l, nil)
}

// issueCommand signs and stores the receipt of an ended command.
func (c *Controller) issueCommand(ctx context.Context, cmd *bothy.Command) (*bothy.Receipt, error) {
	comp, err := c.store.FindComputer(ctx, cmd.TenantID, cmd.ComputerID)
	if err != nil {
		return nil, err
	}
	b := c.newBody(bothy.ReceiptCommand, comp)
	b.CommandID, b.LeaseID, b.Generation, b.WorkJobID = cmd.ID, cmd.LeaseID, cmd.Generation, cmd.WorkJobID
	b.State, b.ExitCode, b.Signal, b.OutputDigest = cmd.State, cmd.ExitCode, cmd.Signal, cmd.OutputDigest
	b.CreatedAt, b.DispatchedAt, b.StartedAt, b.FinishedAt = cmd.CreatedAt, cmd.DispatchedAt, cmd.StartedAt, cmd.FinishedAt
	b.Usage.DurationMS = cmd.DurationMS
	b.Usage.SetUsage(cmd.Usage)
	b.AuthorityDigest = cmd.AuthorityDigest
	for flag, name := range map[*bool]string{&cmd.OOMKilled: "oom_killed", &cmd.PidsLimited: "pids_limited", &cmd.DiskLimited: "disk_limited"} {
		if *flag {
			b.Limited = append(b.Limited, name)
		}
	}
	slices.Sort(b.Limited)
	if cmd.LeaseID == "" {
		// It never reached a runtime: nothing ran, nothing changed.
		b.RevisionBefore, b.RevisionAfter = comp.Revision, comp.Revision
	} else {
		l, err := c.store.FindLease(ctx, cmd.TenantID, cmd.LeaseID)
		if err != nil {
			return nil, err
		}
		b.Provider, b.ImageDigest = l.Provider, receipt.ImageDigest(l.Provider, c.cfg.Version)
		b.RevisionBefore, b.RevisionAfter = cmd.RevisionBefore, cmd.RevisionAfter
		if b.RevisionAfter == 0 {
			b.RevisionAfter = b.RevisionBefore // its checkpoint committed nothing
		}
	}
	return c.save(ctx, b)
}

// issueLease signs and stores the receipt of a released lease; use is what
// the computer was charged for it, or nil to read its commands' usage.
func (c *Controller) issueLease(ctx context.Context, l *bothy.Lease, use *bothy.Usage) (*bothy.Receipt, error) {
	comp, err := c.store.FindComputer(ctx, l.TenantID, l.ComputerID)
	if err != nil {
		return nil, err
	}
	b := c.newBody(bothy.ReceiptLease, comp)
	b.LeaseID, b.Generation, b.WorkJobID = l.ID, l.Generation, comp.WorkJobID
	b.Provider, b.ImageDigest = l.Provider, receipt.ImageDigest(l.Provider, c.cfg.Version)
	b.RevisionBefore, b.RevisionAfter = l.RevisionBefore, l.RevisionAfter
	b.Disposition = l.Disposition
	switch {
	case l.Residue != "":
		b.Residue = json.RawMessage(l.Residue)
	case l.Disposition != bothy.LeaseLost:
		// The runtime tore the lease down and found nothing left.
		b.Residue = json.RawMessage(`{}`)
	}
	b.CreatedAt, b.StartedAt, b.FinishedAt = l.ReservedAt, l.StartedAt, l.ReleasedAt
	b.Usage.DurationMS = l.ReleasedAt.Sub(l.ReservedAt).Milliseconds()
	if use == nil {
		u, err := c.leaseUsage(ctx, l)
		if err != nil {
			return nil, err
		}
		use = &u
	}
	b.Usage.SetUsage(*use)
	return c.save(ctx, b)
}

// leaseUsage totals the usage of the commands the lease ran.
func (c *Controller) leaseUsage(ctx context.Context, l *bothy.Lease) (bothy.Usage, error) {
	var total bothy.Usage
	cmds, err := c.listAll(ctx, l.TenantID, bothy.CommandFilter{ComputerID: l.ComputerID, LeaseID: l.ID})
	if err != nil {
		return total, err
	}
	for _, cmd := range cmds {
		total.Add(cmd.Usage)
	}
	return total, nil
}

// newBody starts a receipt body with what every receipt states.
func (c *Controller) newBody(kind string, comp *bothy.Computer) *bothy.ReceiptBody {
	return &bothy.ReceiptBody{
		ID: newID("rct_"), Kind: kind, TenantID: comp.TenantID, ComputerID: comp.ID, Profile: comp.Profile,
		PolicyDigest: c.policyDigest, Egress: comp.Egress.Mode, IssuedAt: c.now().UTC(),
	}
}

// save signs b and stores the receipt, once per subject: if another
// issuer stored one first (a receipt request racing the command's end),
// that one is returned.
func (c *Controller) save(ctx context.Context, b *bothy.ReceiptBody) (*bothy.Receipt, error) {
	r, err := c.receipts.Sign(b)
	if err != nil {
		return nil, err
	}
	if err := c.store.CreateReceipt(ctx, r); bothy.ErrorCode(err) == bothy.ECONFLICT {
		return c.store.FindReceipt(ctx, r.TenantID, r.SubjectKind, r.SubjectID)
	} else if err != nil {
		return nil, err
	}
	return r, nil
}
