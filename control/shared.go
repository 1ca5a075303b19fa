package control

import (
	"context"

	"github.com/bothyhq/bothy"
)

// admitShared refuses a run that would let one caller's processes and
// another's secrets meet in a sandbox that cannot keep them apart. On a
// provider that does not isolate commands (Config.Isolating: gvisor, the
// process provider, bwrap without Landlock), a process a command leaves
// running can read the environment of every later command of its lease,
// and a later command can read the environment of a process an earlier
// one left. So a lease is one trust domain there:
//
//   - a caller whose authority lacks a secret that a command of the lease
//     (or one admitted to wait for it) was given is refused;
//   - a command that names secrets is refused if a command of the lease
//     was admitted under another authority (by digest: whether that
//     authority holds the secret is not stored, so any other authority
//     is refused).
//
// Both say to stop the computer: its next lease is a fresh sandbox. The
// server itself (nil authority) passes the first rule. The caller holds
// c.sharedMu, so that two admissions cannot both miss each other.
func (c *Controller) admitShared(ctx context.Context, comp *bothy.Computer, req *bothy.RunRequest) error {
	provider := c.cfg.Profiles[comp.Profile]
	if c.cfg.Isolating[provider] {
		return nil
	}
	digest := ""
	if req.Authority != nil {
		digest = req.Authority.Digest()
	}
	var earlier []*bothy.Command
	if l, err := c.store.ActiveLease(ctx, comp.TenantID, comp.ID); err == nil {
		cmds, err := c.listAll(ctx, comp.TenantID, bothy.CommandFilter{ComputerID: comp.ID, LeaseID: l.ID})
		if err != nil {
			return err
		}
		earlier = cmds
	} else if bothy.ErrorCode(err) != bothy.ENOTFOUND {
		return err
	}
	waiting, err := c.listAll(ctx, comp.TenantID, bothy.CommandFilter{ComputerID: comp.ID, State: bothy.CommandAdmitted})
	if err != nil {
		return err
	}
	for _, e := range append(earlier, waiting...) {
		if a := req.Authority; a != nil {
			for _, ref := range e.Secrets {
				if !a.CanUseSecret(ref.Name) {
					return bothy.Errorf(bothy.EFORBIDDEN, "computer %s's sandbox gave command %s the secret %q, and its provider (%s) cannot keep that command's processes from this one's; "+
						"this token may not use that secret (it needs the scope %s%s); stop the computer to run this in a fresh sandbox",
						comp.ID, e.ID, ref.Name, provider, bothy.ScopeSecretPrefix, ref.Name)
				}
			}
		}
		if len(req.Secrets) > 0 && e.AuthorityDigest != digest {
			return bothy.Errorf(bothy.EFORBIDDEN, "computer %s's sandbox ran command %s under another token's authority, and its provider (%s) cannot keep that command's processes from this one's secrets; "+
				"stop the computer to run this in a fresh sandbox", comp.ID, e.ID, provider)
		}
	}
	return nil
}

// listAll returns every command that f selects, page by page.
func (c *Controller) listAll(ctx context.Context, tenantID string, f bothy.CommandFilter) ([]*bothy.Command, error) {
	var all []*bothy.Command
	f.Limit = 1000
	for {
		page, err := c.store.ListCommands(ctx, tenantID, f)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < f.Limit {
			return all, nil
		}
		f.Offset += len(page)
	}
}
