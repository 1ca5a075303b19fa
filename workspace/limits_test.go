package workspace_test

import (
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/storetest"
	"github.com/bothyhq/bothy/workspace"
)

// grepResponseBytes is the size of the JSON body the HTTP API would write
// for res (http.handleGrep encodes the whole result into memory).
func grepResponseBytes(t *testing.T, res *bothy.GrepResult) int64 {
	t.Helper()
	var n int64
	for _, m := range res.Matches {
		n += int64(len(m.Text))
		for _, s := range m.Before {
			n += int64(len(s))
		}
		for _, s := range m.After {
			n += int64(len(s))
		}
	}
	return n
}

// Context lines are copied into every match, so the output is charged
// against MaxGrepOutput, not only the bytes read.
func TestFS_Grep_OutputCap(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		line := strings.Repeat("x", 32<<10-1) + "\n" // 32 KiB
		e.write("f", strings.Repeat(line, 64))       // 2 MiB, 64 lines
		res, err := e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{Pattern: "x", Context: 100})
		if err != nil {
			t.Fatal(err)
		}
		if got := grepResponseBytes(t, res); got > workspace.MaxGrepOutput || !res.Truncated || len(res.Matches) == 0 {
			t.Fatalf("grep returned %d bytes of text in %d matches, truncated %v; want at most %d, truncated",
				got, len(res.Matches), res.Truncated, workspace.MaxGrepOutput)
		}
	})
}

// A caller's limit is capped at MaxGrepLimit.
func TestFS_Grep_LimitCapped(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		e.write("f", strings.Repeat("\n", 2*workspace.MaxGrepLimit))
		res, err := e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{Pattern: "^", Limit: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Matches) != workspace.MaxGrepLimit || !res.Truncated {
			t.Fatalf("limit 1<<30: %d matches, truncated %v; want %d, truncated", len(res.Matches), res.Truncated, workspace.MaxGrepLimit)
		}
	})
}

// Consecutive "**" collapse into one, and a pattern may hold at most 8.
func TestFS_Glob_DoubleStars(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		e.write("a/b/c/zzz", "x")
		infos, err := e.fs.Glob(e.ctx, e.tenant, e.computer, strings.Repeat("**/", 1300)+"zzz", 0)
		if err != nil || len(infos) != 1 || infos[0].Path != "a/b/c/zzz" {
			t.Fatalf("1300 consecutive '**': %v %v", infos, err)
		}
		_, err = e.fs.Glob(e.ctx, e.tenant, e.computer, strings.Repeat("**/a/", 9)+"zzz", 0)
		storetest.WantCode(t, err, bothy.EINVALID)
		_, err = e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{Pattern: "x", Include: strings.Repeat("**/a/", 9) + "*"})
		storetest.WantCode(t, err, bothy.EINVALID)
	})
}

// Escape attempts found by a review: every one must stay refused.
func TestFS_EscapeAttempts(t *testing.T) {
	run(t, func(t *testing.T, e *env) {
		e.mkdir("a/b")
		e.write("a/b/f", "x")
		e.symlink("a", "la")
		e.symlink("..", "a/up")
		e.symlink("a/up/..", "chain")
		e.symlink("/etc", "abs")
		e.symlink("/workspace/../etc", "mp")
		e.symlink("loop2", "loop1")
		e.symlink("loop1", "loop2")
		for _, p := range []string{"chain/x", "abs/passwd", "mp/x", "loop1/x"} {
			_, err := e.fs.WriteFile(e.ctx, e.tenant, e.computer, p, strings.NewReader("pwn"), bothy.WriteOptions{MkdirParents: true})
			if err == nil {
				t.Errorf("write %q succeeded", p)
			}
		}
		// These resolve inside: "la/up/up/x" is "up/x" (up created at the root).
		e.write("la/up/up/x", "in")
		if e.read("up/x") != "in" {
			t.Errorf("la/up/up/x did not land at up/x")
		}
		_, err := e.fs.Rename(e.ctx, e.tenant, e.computer, "a", "la/b/moved")
		storetest.WantCode(t, err, bothy.EINVALID)
		_, err = e.fs.Rename(e.ctx, e.tenant, e.computer, "a", "a/up/la/b/z")
		storetest.WantCode(t, err, bothy.EINVALID)
		_, err = e.fs.Grep(e.ctx, e.tenant, e.computer, bothy.GrepOptions{Pattern: "x", Include: "**/../../*"})
		storetest.WantCode(t, err, bothy.EINVALIDPATH)
		_, err = e.fs.Glob(e.ctx, e.tenant, e.computer, "a/../../*", 0)
		storetest.WantCode(t, err, bothy.EINVALIDPATH)
		infos, err := e.fs.Glob(e.ctx, e.tenant, e.computer, "la/**", 0)
		if err != nil || len(infos) != 0 {
			t.Errorf("glob through symlink: %v %v", infos, err)
		}
	})
}
