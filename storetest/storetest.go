// Package storetest is the conformance suite for bothy.Store. Every
// implementation runs it from its own tests:
//
//	func TestStore(t *testing.T) {
//		storetest.TestStore(t, func(t *testing.T) bothy.Store { return storetest.OpenSQLite(t) })
//	}
//
// Tests of other packages that need a store get one from OpenSQLite and
// OpenPostgres, or run on every engine with Each.
package storetest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

// TestStore runs the conformance suite. open must return a new, empty store
// each time it is called, and may be called from parallel subtests; TestStore
// closes the store when the subtest ends. Subtests are named Method/Case, such
// as "CreateComputer/ErrConflict", and run in parallel.
func TestStore(t *testing.T, open func(t *testing.T) bothy.Store) {
	newStore := func(t *testing.T) bothy.Store {
		t.Helper()
		s := open(t)
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return s
	}
	testTenants(t, newStore)
	testComputers(t, newStore)
	testRevisions(t, newStore)
	testLeases(t, newStore)
	testCommitLease(t, newStore)
	testCommands(t, newStore)
	testEvents(t, newStore)
	testTokens(t, newStore)
	testReceipts(t, newStore)
}

// run runs f as a parallel subtest.
func run(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		f(t)
	})
}

// opener returns a new, empty store that is closed when the test ends.
type opener func(t *testing.T) bothy.Store

// hashKey returns a distinct 32-byte key for a tenant id.
func hashKey(id string) []byte {
	k := sha256.Sum256([]byte("key:" + id))
	return k[:]
}

// mustCreateTenant stores a tenant with id.
func mustCreateTenant(t *testing.T, s bothy.Store, id string) *bothy.Tenant {
	t.Helper()
	tn := &bothy.Tenant{ID: id, Name: "Tenant " + id, HashKey: hashKey(id)}
	if err := s.CreateTenant(t.Context(), tn); err != nil {
		t.Fatalf("CreateTenant(%s): %v", id, err)
	}
	return tn
}

// mustCreateComputer stores c, first filling TenantID and a profile if empty.
func mustCreateComputer(t *testing.T, s bothy.Store, tenantID string, c *bothy.Computer) *bothy.Computer {
	t.Helper()
	c.TenantID = tenantID
	if c.Profile == "" {
		c.Profile = "standard"
	}
	if err := s.CreateComputer(t.Context(), c); err != nil {
		t.Fatalf("CreateComputer(%s/%s): %v", tenantID, c.ID, err)
	}
	return c
}

// mustFindComputer returns the stored computer.
func mustFindComputer(t *testing.T, s bothy.Store, tenantID, id string) *bothy.Computer {
	t.Helper()
	c, err := s.FindComputer(t.Context(), tenantID, id)
	if err != nil {
		t.Fatalf("FindComputer(%s/%s): %v", tenantID, id, err)
	}
	return c
}

// mustCommit commits and returns the revision.
func mustCommit(t *testing.T, s bothy.Store, r *bothy.CommitRequest) *bothy.Revision {
	t.Helper()
	rev, err := s.CommitRevision(t.Context(), r)
	if err != nil {
		t.Fatalf("CommitRevision(%s/%s base %d): %v", r.TenantID, r.ComputerID, r.Base, err)
	}
	return rev
}

// WantCode fails the test unless err carries the domain error code
// (bothy.ErrorCode), for the tests of any layer that returns domain errors.
func WantCode(t testing.TB, err error, code string) {
	t.Helper()
	if got := bothy.ErrorCode(err); got != code {
		t.Fatalf("error code = %q, want %q (err: %v)", got, code, err)
	}
}

// diffTimes reports a difference between two times, or "". Stores may keep
// less than nanosecond precision, so the suite compares stored times with
// what the store returned, never with what the caller passed.
func diffTimes(what string, got, want time.Time) string {
	if !got.Equal(want) {
		return fmt.Sprintf("%s = %v, want %v", what, got, want)
	}
	if got.Location() != time.UTC {
		return fmt.Sprintf("%s location = %v, want UTC", what, got.Location())
	}
	return ""
}

// checkComputer fails the test unless got equals want field by field.
func checkComputer(t *testing.T, got, want *bothy.Computer) {
	t.Helper()
	for _, d := range []string{diffTimes("CreatedAt", got.CreatedAt, want.CreatedAt), diffTimes("UpdatedAt", got.UpdatedAt, want.UpdatedAt)} {
		if d != "" {
			t.Errorf("computer %s: %s", want.ID, d)
		}
	}
	g, w := *got, *want
	g.CreatedAt, g.UpdatedAt, w.CreatedAt, w.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("computer = %+v\nwant       %+v", g, w)
	}
}

// checkRevision fails the test unless got equals want field by field, with
// Packs compared as sets.
func checkRevision(t *testing.T, got, want *bothy.Revision) {
	t.Helper()
	if d := diffTimes("CreatedAt", got.CreatedAt, want.CreatedAt); d != "" {
		t.Errorf("revision %d: %s", want.Number, d)
	}
	if !sameSet(got.Packs, want.Packs) {
		t.Errorf("revision %d packs = %q, want %q", want.Number, got.Packs, want.Packs)
	}
	g, w := *got, *want
	g.CreatedAt, g.Packs, w.CreatedAt, w.Packs = time.Time{}, nil, time.Time{}, nil
	if !reflect.DeepEqual(g, w) {
		t.Errorf("revision = %+v\nwant       %+v", g, w)
	}
}

// sameSet reports whether a and b hold the same set of strings.
func sameSet(a, b []string) bool {
	set := func(ps []string) map[string]bool {
		m := map[string]bool{}
		for _, p := range ps {
			m[p] = true
		}
		return m
	}
	return reflect.DeepEqual(set(a), set(b))
}

// computerIDs returns the IDs of cs in order.
func computerIDs(cs []*bothy.Computer) []string {
	ids := []string{}
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}

// errStop is returned by a ReferencedPacks callback to stop early.
var errStop = errors.New("stop")

// equalBytes reports whether two keys are equal.
func equalBytes(a, b []byte) bool { return bytes.Equal(a, b) }
