package sandbox

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/uidpool"
)

// Defaults of Host that every isolating provider shares, and the pids
// limit of a lease whose Limits.Pids is 0.
const (
	DefaultCgroupRoot = "/sys/fs/cgroup"
	DefaultUIDCount   = 65536
	DefaultPids       = 4096
)

// Host is the configuration that every isolating provider has: what it
// keeps on the host, where, and how long a command's tree has between
// SIGTERM and SIGKILL. A provider's Options embed it.
type Host struct {
	// StateDir holds a directory per lease (under leases/), the uid
	// reservations (under uids/) and what else the provider keeps.
	StateDir string
	// CgroupRoot is where the cgroup hierarchies are mounted; CgroupParent
	// is the directory under each that holds the leases' cgroups.
	CgroupRoot, CgroupParent string
	// Leases get uids UIDBase to UIDBase+UIDCount-1; the same number is
	// their gid. No other user of the host may use these ids.
	UIDBase, UIDCount int
	// KillGrace is the time between SIGTERM and SIGKILL at a timeout or
	// cancel; zero means DefaultKillGrace.
	KillGrace time.Duration
}

// WithDefaults returns h with its zero fields taken from the provider's
// defaults d, and CgroupRoot and UIDCount, where d has none either, from
// DefaultCgroupRoot and DefaultUIDCount.
func (h Host) WithDefaults(d Host) Host {
	h.StateDir = cmp.Or(h.StateDir, d.StateDir)
	h.CgroupRoot = cmp.Or(h.CgroupRoot, d.CgroupRoot, DefaultCgroupRoot)
	h.CgroupParent = cmp.Or(h.CgroupParent, d.CgroupParent)
	h.UIDBase = cmp.Or(h.UIDBase, d.UIDBase)
	h.UIDCount = cmp.Or(h.UIDCount, d.UIDCount, DefaultUIDCount)
	h.KillGrace = cmp.Or(h.KillGrace, d.KillGrace)
	return h
}

// ReservationTTL is how long a uid named by WorkspaceUID stays reserved
// for a lease that never starts (its runtime gave up between WorkspaceUID
// and Start). It is far longer than that step takes.
const ReservationTTL = time.Hour

// Leases are an isolating provider's leases on the host: each has a
// directory under Dir and a uid of UIDs, which its commands run as and its
// workspace is owned by. They keep no state in memory: any Leases with the
// same fields see the same leases.
type Leases struct {
	Dir  string
	UIDs *uidpool.Pool
}

// NewLeases returns the leases under h.StateDir/leases, with the uids of
// h's range reserved under h.StateDir/uids. A reservation is live once its
// lease has started (it has a directory) or, if running is set, while
// running reports true for its uid.
func NewLeases(h Host, running func(uid int) bool) *Leases {
	l := &Leases{Dir: filepath.Join(h.StateDir, "leases")}
	l.UIDs = &uidpool.Pool{
		Dir:   filepath.Join(h.StateDir, "uids"),
		Base:  h.UIDBase,
		Count: h.UIDCount,
		TTL:   ReservationTTL,
		Live: func(uid int, leaseID string) bool {
			return leaseID != "" && Exists(filepath.Join(l.Dir, leaseID)) || running != nil && running(uid)
		},
	}
	return l
}

// WorkspaceUID reserves the lease's uid (the first free one of the range,
// or the one already reserved for it) and returns it, for
// bothy.WorkspaceOwner; Own takes it.
func (l *Leases) WorkspaceUID(leaseID string) (int, error) {
	if err := bothy.ValidateID("lease id", leaseID); err != nil {
		return 0, err
	}
	return l.UIDs.Reserve(leaseID)
}

// Create checks spec (valid, its workspace a directory, its network
// namespace, if it names one, a namespace) and creates the lease's
// directory with mode perm, which it returns. A lease that has one already
// is ECONFLICT.
func (l *Leases) Create(spec bothy.LeaseSpec, perm fs.FileMode) (string, error) {
	if err := spec.Validate(); err != nil {
		return "", err
	}
	if fi, err := os.Stat(spec.Workspace); err != nil || !fi.IsDir() {
		return "", bothy.Errorf(bothy.EINVALID, "workspace %s is not a directory", spec.Workspace)
	}
	if err := CheckNetNS(spec.NetNS); err != nil {
		return "", err
	}
	dir := filepath.Join(l.Dir, spec.LeaseID)
	if err := os.Mkdir(dir, perm); errors.Is(err, fs.ErrExist) {
		return "", bothy.Errorf(bothy.ECONFLICT, "lease %s is already started", spec.LeaseID)
	} else if err != nil {
		return "", fmt.Errorf("create lease dir: %w", err)
	}
	return dir, nil
}

// Own takes the lease's uid (the one WorkspaceUID reserved, if it was
// called) and chowns the workspace to it unless its root already is the
// uid's (uidpool.Chown).
func (l *Leases) Own(spec bothy.LeaseSpec) (int, error) {
	uid, err := l.UIDs.Reserve(spec.LeaseID)
	if err != nil {
		return 0, err
	}
	return uid, uidpool.Chown(spec.Workspace, uid)
}

// Held returns nil if uid is still reserved for the lease, for Recover,
// and ENOTFOUND if it is not.
func (l *Leases) Held(leaseID string, uid int) error {
	if !l.UIDs.Holds(uid, leaseID) {
		return bothy.Errorf(bothy.ENOTFOUND, "sandbox of lease %s is gone (uid %d not held)", leaseID, uid)
	}
	return nil
}

// Decode decodes a provider's handle and, with decode, the provider's
// state in it, for Recover.
func Decode[S any](handle []byte, provider string, decode func(*bothy.SandboxHandle) (S, error)) (*bothy.SandboxHandle, S, error) {
	var st S
	h, err := bothy.DecodeSandboxHandle(handle, provider)
	if err != nil {
		return nil, st, err
	}
	if st, err = decode(h); err != nil {
		return nil, st, err
	}
	return h, st, nil
}

// Stop is an isolating provider's Stop: it decodes the provider's state of
// h, tears down what the lease has on the host and returns what is left,
// with an error that names it unless nothing is.
func Stop[S any](h *bothy.SandboxHandle, decode func(*bothy.SandboxHandle) (S, error), teardown func(S) *bothy.Residue) (*bothy.Residue, error) {
	st, err := decode(h)
	if err != nil {
		return &bothy.Residue{Other: []string{err.Error()}}, err
	}
	res := teardown(st)
	if !res.Empty() {
		b, _ := json.Marshal(res)
		return res, fmt.Errorf("stop lease %s: residue %s", h.LeaseID, b)
	}
	return res, nil
}
