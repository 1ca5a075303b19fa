package control_test

import (
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/workspace"
)

// TestController_Files routes each change by the computer's state: a cold
// computer's change is committed to the store, and a change of a computer
// a runtime owns goes down the apply path, which refuses it while no lease
// of the computer is ready (the bare workspace refuses it too, with its own
// answer).
func TestController_Files(t *testing.T) {
	stores(t, func(t *testing.T, s bothy.Store) {
		f := newFixture(t, s)
		blobs, err := localblob.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		ws := workspace.New(s, blobs, workspace.Options{Retries: 1})
		files := f.c.Files(ws)
		t.Run("Cold", func(t *testing.T) {
			rev, err := files.WriteFile(f.ctx, "t1", "cmp1", "a.txt", strings.NewReader("a"), bothy.WriteOptions{})
			if err != nil {
				t.Fatal(err)
			} else if rev.Number != 1 || rev.CreatedBy != "api:"+bothy.FileOpWrite {
				t.Fatalf("revision %+v, want 1 by the API", rev)
			}
		})
		t.Run("ErrConflict", func(t *testing.T) {
			if err := s.SetComputerState(f.ctx, "t1", "cmp1", bothy.StateStarting); err != nil {
				t.Fatal(err)
			}
			_, err := files.WriteFile(f.ctx, "t1", "cmp1", "b.txt", strings.NewReader("b"), bothy.WriteOptions{})
			if bothy.ErrorCode(err) != bothy.ECONFLICT || !strings.Contains(err.Error(), "try again when it is active or cold") {
				t.Fatalf("through the control plane: %v, want the apply path's ECONFLICT", err)
			}
			_, err = ws.WriteFile(f.ctx, "t1", "cmp1", "b.txt", strings.NewReader("b"), bothy.WriteOptions{})
			if bothy.ErrorCode(err) != bothy.ECONFLICT || !strings.Contains(err.Error(), "through its runtime") {
				t.Fatalf("the bare workspace: %v, want its ECONFLICT", err)
			}
		})
	})
}
