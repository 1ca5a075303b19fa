package http_test

import (
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/receipt"
)

// TestReceipts_StoreOnly: a server without a ReceiptIssuer serves stored
// receipts byte for byte, scoped by tenant, and publishes no key.
func TestReceipts_StoreOnly(t *testing.T) {
	e := newEnv(t, openSQLite)
	// The receipt's command must exist and be of the token owner's computer.
	cm := mustCreate(t, e.acme, bhttp.CreateComputerRequest{})
	if _, err := e.store.CreateCommand(t.Context(), &bothy.Command{ID: "cmd_1", TenantID: "acme", ComputerID: cm.ID, Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	s := receipt.NewSigner(nil)
	code := 0
	rc, err := s.Sign(&bothy.ReceiptBody{ID: "rct_1", Kind: bothy.ReceiptCommand, TenantID: "acme", ComputerID: "cmp_1",
		CommandID: "cmd_1", WorkJobID: "job <&> é", ExitCode: &code, IssuedAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CreateReceipt(t.Context(), rc); err != nil {
		t.Fatal(err)
	}
	got, err := e.ro.CommandReceipt(t.Context(), "cmd_1")
	if err != nil {
		t.Fatal(err)
	}
	if want := string(receipt.Encode(rc)) + "\n"; string(got) != want {
		t.Fatalf("served receipt\n%s\nwant\n%s", got, want)
	}
	if _, err := receipt.Verify(got, s.PublicKey()); err != nil {
		t.Errorf("served receipt does not verify: %v", err)
	}
	if _, err := e.other.CommandReceipt(t.Context(), "cmd_1"); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		t.Errorf("another tenant's receipt: %v, want not_found", err)
	}
	if _, err := e.ro.LeaseReceipt(t.Context(), "cmd_1"); bothy.ErrorCode(err) != bothy.ENOTFOUND {
		t.Errorf("lease receipt of a command id: %v, want not_found", err)
	}
	if _, err := e.ro.ReceiptKey(t.Context()); bothy.ErrorCode(err) != bothy.EUNAVAILABLE {
		t.Errorf("receipt key without an issuer: %v, want unavailable", err)
	}
}
