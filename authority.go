package bothy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Authority scopes, besides profile:NAME. A token carries its authority in
// its scopes, so that one token record says everything a caller may do.
const (
	// ScopeEgressPrefix sets the egress ceiling: "egress:allowlist" or
	// "egress:all". A token with none may create computers with egress
	// none only; admin may use all.
	ScopeEgressPrefix = "egress:"
	// ScopeSecretPrefix names a secret the token may give commands,
	// "secret:NAME", or every secret of its tenant, "secret:*".
	ScopeSecretPrefix = "secret:"
	// ScopeBudgetPrefix sets a budget, "budget:NAME=N" with NAME one of
	// cpu-seconds (CPU time of all the computer's commands together),
	// wall-seconds (of one command) and bytes (scratch bytes of a lease).
	ScopeBudgetPrefix = "budget:"
)

// Budget bounds what a computer may consume; zero is unbounded by the
// caller (the server's limits still apply).
type Budget struct {
	CPUSeconds  int64 `json:"cpu_seconds,omitempty"`
	WallSeconds int64 `json:"wall_seconds,omitempty"`
	Bytes       int64 `json:"bytes,omitempty"`
}

// Authority is what a caller may do, snapshotted at admission onto the
// computer it creates and the commands it runs, so that a later change of
// its token does not change what an admitted request may do, and a
// receipt can name it by digest.
type Authority struct {
	// Profiles the caller may use; ["*"] is every profile.
	Profiles []string `json:"profiles"`
	// Egress is the ceiling of the egress mode: none, allowlist or all.
	Egress string `json:"egress"`
	// Secrets the caller may give commands, by name; ["*"] is all.
	Secrets []string `json:"secrets,omitempty"`
	Budget  Budget   `json:"budget"`
}

// Authority returns the principal's authority, read from its scopes.
func (p *Principal) Authority() Authority {
	if p == nil {
		return Authority{Egress: EgressNone}
	}
	a := Authority{Egress: EgressNone}
	if slices.Contains(p.Scopes, ScopeAdmin) {
		a.Profiles, a.Egress, a.Secrets = []string{"*"}, EgressAll, []string{"*"}
	}
	for _, s := range p.Scopes {
		switch {
		case strings.HasPrefix(s, ScopeProfilePrefix):
			if !slices.Contains(a.Profiles, "*") {
				a.Profiles = append(a.Profiles, strings.TrimPrefix(s, ScopeProfilePrefix))
			}
		case strings.HasPrefix(s, ScopeEgressPrefix):
			if m := strings.TrimPrefix(s, ScopeEgressPrefix); egressRank(m) > egressRank(a.Egress) {
				a.Egress = m
			}
		case strings.HasPrefix(s, ScopeSecretPrefix):
			if !slices.Contains(a.Secrets, "*") {
				a.Secrets = append(a.Secrets, strings.TrimPrefix(s, ScopeSecretPrefix))
			}
		case strings.HasPrefix(s, ScopeBudgetPrefix):
			name, n, _ := parseBudgetScope(s)
			switch name {
			case "cpu-seconds":
				a.Budget.CPUSeconds = n
			case "wall-seconds":
				a.Budget.WallSeconds = n
			case "bytes":
				a.Budget.Bytes = n
			}
		}
	}
	if len(a.Profiles) == 0 {
		a.Profiles = []string{DefaultProfile}
	}
	if slices.Contains(a.Secrets, "*") {
		a.Secrets = []string{"*"}
	}
	slices.Sort(a.Profiles)
	slices.Sort(a.Secrets)
	return a
}

// CanUseProfile reports whether the authority includes the profile.
func (a *Authority) CanUseProfile(profile string) bool {
	return slices.Contains(a.Profiles, "*") || slices.Contains(a.Profiles, profile)
}

// CanUseEgress reports whether the authority's ceiling admits the mode.
func (a *Authority) CanUseEgress(mode string) bool {
	if mode == "" {
		mode = EgressNone
	}
	return egressRank(mode) <= egressRank(a.Egress)
}

// CanUseSecret reports whether the authority lists the secret.
func (a *Authority) CanUseSecret(name string) bool {
	return slices.Contains(a.Secrets, "*") || slices.Contains(a.Secrets, name)
}

// Digest returns the hex SHA-256 of the authority's JSON encoding, which
// is deterministic (sorted lists, fixed field order).
func (a *Authority) Digest() string {
	b, _ := json.Marshal(a)
	d := sha256.Sum256(b)
	return hex.EncodeToString(d[:])
}

func egressRank(mode string) int {
	switch mode {
	case EgressNone:
		return 0
	case EgressAllowlist:
		return 1
	case EgressAll:
		return 2
	}
	return 3 // unknown: above every ceiling
}

// validateAuthorityScope checks an egress, secret or budget scope; ok is
// false when s is none of them.
func validateAuthorityScope(s string) (ok bool, err error) {
	switch {
	case strings.HasPrefix(s, ScopeEgressPrefix):
		if m := strings.TrimPrefix(s, ScopeEgressPrefix); m != EgressAllowlist && m != EgressAll {
			return true, Errorf(EINVALID, "scope %q: the egress ceiling is egress:allowlist or egress:all", s)
		}
		return true, nil
	case strings.HasPrefix(s, ScopeSecretPrefix):
		if name := strings.TrimPrefix(s, ScopeSecretPrefix); name != "*" {
			if err := ValidateID("secret", name); err != nil {
				return true, err
			}
		}
		return true, nil
	case strings.HasPrefix(s, ScopeBudgetPrefix):
		_, _, err := parseBudgetScope(s)
		return true, err
	}
	return false, nil
}

func parseBudgetScope(s string) (string, int64, error) {
	name, val, ok := strings.Cut(strings.TrimPrefix(s, ScopeBudgetPrefix), "=")
	n, err := strconv.ParseInt(val, 10, 64)
	if !ok || err != nil || n <= 0 || (name != "cpu-seconds" && name != "wall-seconds" && name != "bytes") {
		return "", 0, Errorf(EINVALID, "scope %q: want budget:cpu-seconds=N, budget:wall-seconds=N or budget:bytes=N with N > 0", s)
	}
	return name, n, nil
}

// AdmitRun checks a run request on comp against the caller's authority
// (req.Authority; nil is the server itself) and the computer's budget,
// which its creator's authority set. A profile or an egress mode above the
// caller's own is EFORBIDDEN, as is a computer whose CPU budget is spent. It caps
// req.TimeoutMS at the wall-time budgets of the caller and the computer.
func AdmitRun(comp *Computer, req *RunRequest) error {
	budgets := []Budget{}
	if a := req.Authority; a != nil {
		if !a.CanUseProfile(comp.Profile) {
			return Errorf(EFORBIDDEN, "this token may not use profile %q (it needs the scope %s%s)", comp.Profile, ScopeProfilePrefix, comp.Profile)
		} else if !a.CanUseEgress(comp.Egress.Mode) {
			// A caller may not borrow a computer's network reach that its
			// own authority lacks.
			return Errorf(EFORBIDDEN, "this token may not run commands on a computer with egress %q (its ceiling is %q)", comp.Egress.Mode, a.Egress)
		}
		for _, ref := range req.Secrets {
			if !a.CanUseSecret(ref.Name) {
				return Errorf(EFORBIDDEN, "this token may not use secret %q (it needs the scope %s%s)", ref.Name, ScopeSecretPrefix, ref.Name)
			}
		}
		budgets = append(budgets, a.Budget)
	}
	if comp.Authority != nil {
		budgets = append(budgets, comp.Authority.Budget)
	}
	for _, b := range budgets {
		if b.CPUSeconds > 0 && comp.Usage.CPUMicros >= b.CPUSeconds*1e6 {
			return Errorf(EFORBIDDEN, "computer %s has used its CPU budget of %d seconds", comp.ID, b.CPUSeconds)
		}
		if wall := b.WallSeconds * 1000; wall > 0 && (req.TimeoutMS == 0 || req.TimeoutMS > wall) {
			req.TimeoutMS = wall
		}
	}
	return nil
}

// ScratchBytes returns the scratch limit of a lease of comp: the server's
// limit, lowered to the bytes budget of the computer's creator.
func ScratchBytes(comp *Computer, server int64) int64 {
	if comp.Authority != nil && comp.Authority.Budget.Bytes > 0 && (server == 0 || comp.Authority.Budget.Bytes < server) {
		return comp.Authority.Budget.Bytes
	}
	return server
}
