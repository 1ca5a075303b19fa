package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

// newReceipt returns a receipt of a subject; the body and signature are
// opaque to the store, which keeps their bytes exactly.
func newReceipt(tenantID, id, kind, subject string) *bothy.Receipt {
	return &bothy.Receipt{
		TenantID: tenantID, ID: id, SubjectKind: kind, SubjectID: subject,
		Body:      []byte(fmt.Sprintf(`{"id":%q,"kind":%q,"subject":%q,"text":"a\u0026b é \n"}`, id, kind, subject)),
		KeyID:     "ed25519:0123456789abcdef",
		Signature: append(bytes.Repeat([]byte{0, 0xff}, 31), 1, 2),
	}
}

// mustCreateReceipt stores r.
func mustCreateReceipt(t *testing.T, s bothy.Store, r *bothy.Receipt) *bothy.Receipt {
	t.Helper()
	if err := s.CreateReceipt(t.Context(), r); err != nil {
		t.Fatalf("CreateReceipt(%s/%s): %v", r.TenantID, r.ID, err)
	}
	return r
}

// checkReceipt fails the test unless got equals want, bytes and all.
func checkReceipt(t *testing.T, got, want *bothy.Receipt) {
	t.Helper()
	if d := diffTimes("CreatedAt", got.CreatedAt, want.CreatedAt); d != "" {
		t.Errorf("receipt %s: %s", want.ID, d)
	}
	if got.TenantID != want.TenantID || got.ID != want.ID || got.SubjectKind != want.SubjectKind ||
		got.SubjectID != want.SubjectID || got.KeyID != want.KeyID {
		t.Errorf("receipt = %+v\nwant      %+v", got, want)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("receipt %s body = %q, want %q", want.ID, got.Body, want.Body)
	}
	if !bytes.Equal(got.Signature, want.Signature) {
		t.Errorf("receipt %s signature = %x, want %x", want.ID, got.Signature, want.Signature)
	}
}

func receiptIDs(rs []*bothy.Receipt) []string {
	ids := []string{}
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids
}

func testReceipts(t *testing.T, open opener) {
	run(t, "CreateReceipt/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		r := mustCreateReceipt(t, s, newReceipt("acme", "r1", bothy.ReceiptCommand, "cmd1"))
		if r.CreatedAt.IsZero() {
			t.Error("CreatedAt not filled")
		}
		got, err := s.FindReceipt(t.Context(), "acme", bothy.ReceiptCommand, "cmd1")
		if err != nil {
			t.Fatal(err)
		}
		checkReceipt(t, got, r)
		// A command and a lease may share an id: the kind tells them apart.
		l := mustCreateReceipt(t, s, newReceipt("acme", "r2", bothy.ReceiptLease, "cmd1"))
		if got, err = s.FindReceipt(t.Context(), "acme", bothy.ReceiptLease, "cmd1"); err != nil {
			t.Fatal(err)
		}
		checkReceipt(t, got, l)
	})

	run(t, "CreateReceipt/ErrConflict", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		first := mustCreateReceipt(t, s, newReceipt("acme", "r1", bothy.ReceiptCommand, "cmd1"))
		// One receipt per subject, whatever its id.
		WantCode(t, s.CreateReceipt(t.Context(), newReceipt("acme", "r2", bothy.ReceiptCommand, "cmd1")), bothy.ECONFLICT)
		// One receipt per id.
		WantCode(t, s.CreateReceipt(t.Context(), newReceipt("acme", "r1", bothy.ReceiptLease, "l1")), bothy.ECONFLICT)
		got, err := s.FindReceipt(t.Context(), "acme", bothy.ReceiptCommand, "cmd1")
		if err != nil {
			t.Fatal(err)
		}
		checkReceipt(t, got, first)
		// Another tenant's subject of the same id is another subject.
		mustCreateTenant(t, s, "other")
		mustCreateReceipt(t, s, newReceipt("other", "r1", bothy.ReceiptCommand, "cmd1"))
	})

	run(t, "CreateReceipt/ErrInvalid", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		for name, mod := range map[string]func(r *bothy.Receipt){
			"kind":      func(r *bothy.Receipt) { r.SubjectKind = "computer" },
			"id":        func(r *bothy.Receipt) { r.ID = "" },
			"subject":   func(r *bothy.Receipt) { r.SubjectID = "" },
			"body":      func(r *bothy.Receipt) { r.Body = []byte("{not json") },
			"signature": func(r *bothy.Receipt) { r.Signature = nil },
		} {
			r := newReceipt("acme", "r1", bothy.ReceiptCommand, "cmd1")
			mod(r)
			if err := s.CreateReceipt(t.Context(), r); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("%s: error %v, want invalid", name, err)
			}
		}
	})

	run(t, "FindReceipt/ErrNotFound", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateTenant(t, s, "other")
		mustCreateReceipt(t, s, newReceipt("acme", "r1", bothy.ReceiptCommand, "cmd1"))
		_, err := s.FindReceipt(t.Context(), "acme", bothy.ReceiptCommand, "cmd2")
		WantCode(t, err, bothy.ENOTFOUND)
		_, err = s.FindReceipt(t.Context(), "acme", bothy.ReceiptLease, "cmd1")
		WantCode(t, err, bothy.ENOTFOUND)
		_, err = s.FindReceipt(t.Context(), "other", bothy.ReceiptCommand, "cmd1")
		WantCode(t, err, bothy.ENOTFOUND)
	})

	run(t, "ListReceipts/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		mustCreateTenant(t, s, "other")
		base := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
		for i, kind := range []string{bothy.ReceiptCommand, bothy.ReceiptLease, bothy.ReceiptCommand} {
			r := newReceipt("acme", fmt.Sprintf("r%d", i+1), kind, fmt.Sprintf("s%d", i+1))
			r.CreatedAt = base.Add(time.Duration(3-i) * time.Second) // newest first by id
			mustCreateReceipt(t, s, r)
		}
		mustCreateReceipt(t, s, newReceipt("other", "x1", bothy.ReceiptCommand, "s1"))
		all, err := s.ListReceipts(t.Context(), "acme", bothy.ReceiptFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(receiptIDs(all)); got != "[r3 r2 r1]" {
			t.Errorf("ListReceipts = %s, want [r3 r2 r1] (oldest first)", got)
		}
		cmds, err := s.ListReceipts(t.Context(), "acme", bothy.ReceiptFilter{SubjectKind: bothy.ReceiptCommand, Offset: 1, Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(receiptIDs(cmds)); got != "[r1]" {
			t.Errorf("ListReceipts(command, offset 1) = %s, want [r1]", got)
		}
		none, err := s.ListReceipts(t.Context(), "nobody", bothy.ReceiptFilter{})
		if err != nil || len(none) != 0 {
			t.Errorf("ListReceipts(nobody) = %v, %v; want empty", receiptIDs(none), err)
		}
		_, err = s.ListReceipts(t.Context(), "acme", bothy.ReceiptFilter{Limit: -1})
		WantCode(t, err, bothy.EINVALID)
	})

	run(t, "WorkJobID/OK", func(t *testing.T) {
		s := open(t)
		mustCreateTenant(t, s, "acme")
		c := mustCreateComputer(t, s, "acme", &bothy.Computer{ID: "c1", WorkJobID: "job-42"})
		checkComputer(t, mustFindComputer(t, s, "acme", "c1"), c)
		cmd := newCommand("acme", "c1", "cmd1", "")
		cmd.WorkJobID = "job-42/step-1"
		mustCreateCommand(t, s, cmd)
		if cmd.WorkJobID != "job-42/step-1" {
			t.Errorf("created command WorkJobID = %q", cmd.WorkJobID)
		}
		checkCommand(t, mustFindCommand(t, s, "acme", "cmd1"), cmd)
		long := &bothy.Computer{ID: "c2", TenantID: "acme", Profile: "standard", WorkJobID: string(make([]byte, bothy.MaxWorkJobIDLen+1))}
		WantCode(t, s.CreateComputer(t.Context(), long), bothy.EINVALID)
	})

	run(t, "Revisions/BeforeAndAfter", func(t *testing.T) {
		s := leaseSetup(t, open)
		mustCommit(t, s, commitReq("acme", "c1", 0, 0))
		l := mustAcquire(t, s, newLease("acme", "c1", "l1", 1))
		if l.RevisionBefore != 1 || l.RevisionAfter != 0 {
			t.Errorf("acquired lease revisions %d → %d, want 1 → 0", l.RevisionBefore, l.RevisionAfter)
		}
		checkLease(t, mustFindLease(t, s, "acme", "l1"), l)
		mustCreateCommand(t, s, newCommand("acme", "c1", "cmd1", ""))
		cmd, err := s.DispatchCommand(t.Context(), "acme", "cmd1", "l1", 1)
		if err != nil {
			t.Fatal(err)
		} else if cmd.RevisionBefore != 1 {
			t.Errorf("dispatched command RevisionBefore = %d, want 1", cmd.RevisionBefore)
		}
		for base := int64(1); base <= 2; base++ {
			req := commitReq("acme", "c1", 1, base)
			req.LeaseID = "l1"
			mustCommit(t, s, req)
		}
		if err := s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseReleased, ""); err != nil {
			t.Fatal(err)
		}
		got := mustFindLease(t, s, "acme", "l1")
		if got.RevisionBefore != 1 || got.RevisionAfter != 3 {
			t.Errorf("released lease revisions %d → %d, want 1 → 3", got.RevisionBefore, got.RevisionAfter)
		}
		if c := mustFindCommand(t, s, "acme", "cmd1"); c.RevisionBefore != 1 {
			t.Errorf("command RevisionBefore = %d after commits, want 1 still", c.RevisionBefore)
		}
	})
}
