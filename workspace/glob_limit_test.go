package workspace_test

import (
	"fmt"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/workspace"
)

// A caller's glob limit is capped at MaxGlobLimit, like grep's.
func TestFS_Glob_LimitCap(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		const n = workspace.MaxGlobLimit + 1
		for start := 0; start < n; start += workspace.DefaultMaxBatch {
			var ops []bothy.FileOp
			for i := start; i < min(n, start+workspace.DefaultMaxBatch); i++ {
				ops = append(ops, bothy.FileOp{Op: bothy.FileOpWrite, Path: fmt.Sprintf("f%06d", i)})
			}
			if _, err := e.fs.Apply(e.ctx, e.tenant, e.computer, ops); err != nil {
				t.Fatal(err)
			}
		}
		got, err := e.fs.Glob(e.ctx, e.tenant, e.computer, "*", 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != workspace.MaxGlobLimit {
			t.Fatalf("glob with limit 1<<30 over %d files: %d entries, want %d", n, len(got), workspace.MaxGlobLimit)
		}
	})
}
