package control_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/receipt"
	"github.com/bothyhq/bothy/runtime"
)

// TestReceipts runs a command to its end and releases its lease: each gets
// one receipt that verifies with the published key and states what
// happened; a command cancelled before dispatch gets one too.
func TestReceipts(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		key := f.c.ReceiptKey()
		if key.Algorithm != "ed25519" || key.KeyID != receipt.KeyID(key.PublicKey) {
			t.Fatalf("published key = %+v", key)
		}
		verify := func(r *bothy.Receipt) *bothy.ReceiptBody {
			t.Helper()
			b, err := receipt.Verify(receipt.Encode(r), key.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		cmd, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Argv: []string{"true"}, WorkJobID: "job-7"})
		if err != nil {
			t.Fatal(err)
		} else if cmd.WorkJobID != "job-7" {
			t.Fatalf("command work_job_id = %q", cmd.WorkJobID)
		}
		_, err = f.c.CommandReceipt(f.ctx, "t1", cmd.ID)
		if code(err) != bothy.ENOTFOUND {
			t.Fatalf("receipt of an admitted command: %v, want not_found", err)
		}
		w := f.ready()
		cred := w.Credential
		if err := f.c.Report(f.ctx, cred, cmd.ID, &runtime.Report{State: bothy.RunRunning}); err != nil {
			t.Fatal(err)
		}
		root := "0000000000000000000000000000000000000000000000000000000000000001"
		if _, err := f.c.Commit(f.ctx, cred, &runtime.CommitRequest{Base: 0, RootDigest: root}); err != nil {
			t.Fatal(err)
		}
		use := bothy.Usage{CPUMicros: 1234567, PeakMemoryBytes: 99 << 20, MemoryByteSeconds: 42 << 20, BytesWritten: 8192, NetworkBytes: 5}
		exit := &bothy.Exit{ExecResult: bothy.ExecResult{ExitCode: 3, Duration: 1500 * time.Millisecond, Usage: use, OOMKilled: true}}
		if err := f.c.Report(f.ctx, cred, cmd.ID, &runtime.Report{State: bothy.RunFinished, Exit: exit, RevisionAfter: 1}); err != nil {
			t.Fatal(err)
		}
		r, err := f.c.CommandReceipt(f.ctx, "t1", cmd.ID)
		if err != nil {
			t.Fatal(err)
		}
		b := verify(r)
		if b.Kind != bothy.ReceiptCommand || b.CommandID != cmd.ID || b.TenantID != "t1" || b.ComputerID != "cmp1" ||
			b.WorkJobID != "job-7" || b.Provider != "fake" || b.LeaseID != w.LeaseID || b.Generation != 1 ||
			b.State != bothy.CommandCompleted || b.ExitCode == nil || *b.ExitCode != 3 || b.Usage.DurationMS != 1500 ||
			b.RevisionBefore != 0 || b.RevisionAfter != 1 || b.Profile != "standard" ||
			b.PolicyDigest != receipt.PolicyDigest(map[string]string{"standard": "fake"}) || b.ImageDigest == "" ||
			b.FinishedAt.IsZero() || b.IssuedAt.IsZero() || b.Usage.CPUMicros != use.CPUMicros ||
			b.Usage.PeakMemoryBytes != use.PeakMemoryBytes || b.Usage.MemoryByteSeconds != use.MemoryByteSeconds ||
			b.Usage.BytesWritten != 8192 || b.Usage.NetworkBytes != 5 || len(b.Limited) != 1 || b.Limited[0] != "oom_killed" || b.Egress != "none" {
			t.Errorf("command receipt body = %s", r.Body)
		}
		// Asking again returns the same receipt: one per command.
		if again, err := f.c.CommandReceipt(f.ctx, "t1", cmd.ID); err != nil || string(again.Body) != string(r.Body) {
			t.Errorf("second CommandReceipt: %v", err)
		}

		if err := f.c.Released(f.ctx, cred, &runtime.ReleaseRequest{Disposition: bothy.LeaseReleased}); err != nil {
			t.Fatal(err)
		}
		lr, err := s.FindReceipt(f.ctx, "t1", bothy.ReceiptLease, w.LeaseID)
		if err != nil {
			t.Fatalf("no lease receipt after release: %v", err)
		}
		lb := verify(lr)
		if lb.Kind != bothy.ReceiptLease || lb.LeaseID != w.LeaseID || lb.Disposition != bothy.LeaseReleased ||
			string(lb.Residue) != "{}" || lb.RevisionBefore != 0 || lb.RevisionAfter != 1 || lb.Provider != "fake" ||
			lb.CommandID != "" || lb.FinishedAt.IsZero() || lb.Usage.CPUMicros != use.CPUMicros || lb.Usage.BytesWritten != 8192 {
			t.Errorf("lease receipt body = %s", lr.Body)
		}
		if got, err := f.c.LeaseReceipt(f.ctx, "t1", w.LeaseID); err != nil || got.ID != lr.ID {
			t.Errorf("LeaseReceipt: %v", err)
		}

		// A receipt lost to a crash is issued when first asked for.
		quick, _, err := f.c.RunCommand(f.ctx, "t1", "cmp1", bothy.RunRequest{Script: "exit 0"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.c.CancelCommand(f.ctx, "t1", quick.ID); err != nil {
			t.Fatal(err)
		}
		cr, err := f.c.CommandReceipt(f.ctx, "t1", quick.ID)
		if err != nil {
			t.Fatal(err)
		}
		var cb bothy.ReceiptBody
		json.Unmarshal(cr.Body, &cb)
		if cb.State != bothy.CommandCancelled || cb.Provider != "" || cb.RevisionBefore != 1 || cb.RevisionAfter != 1 {
			t.Errorf("receipt of a command cancelled before dispatch = %s", cr.Body)
		}
		// Another tenant sees nothing.
		if _, err := f.c.CommandReceipt(f.ctx, "t2", cmd.ID); code(err) != bothy.ENOTFOUND {
			t.Errorf("another tenant's receipt: %v", err)
		}
	})
}
