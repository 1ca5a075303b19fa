package server_test

import (
	"io"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// TestRunPath_ReadOnlyReads checks that a files:read token's reads of an
// active computer write nothing of their own: each read checkpoints the
// lease's disk so that it sees what commands wrote, and that checkpoint
// commits a revision only when the commands changed the workspace, and
// then as the lease's revision, not the reader's.
func TestRunPath_ReadOnlyReads(t *testing.T) {
	e := startRunPath(t)
	ctx := t.Context()
	c := e.newComputer(t, "readonly")
	e.finish(t, e.run(t, c.ID, bothy.RunRequest{Script: "echo out > out.txt", Wait: true}).ID, "", "")
	// A token of the computer's owner (newRunPath names it after the tenant).
	_, secret, err := e.store.CreateToken(ctx, e.tenant, e.tenant, []string{bothy.ScopeComputersRead, bothy.ScopeFilesRead}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ro := bhttp.NewClient(e.client.URL, secret)
	revisions := func() []*bothy.Revision {
		t.Helper()
		revs, err := e.client.ListRevisions(ctx, c.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return revs
	}
	read := func(p string) string {
		t.Helper()
		rc, _, err := ro.ReadFile(ctx, "", c.ID, p, 0, -1)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		return string(b)
	}
	// Every read route, on a workspace no command changed since its last
	// commit, leaves the revisions as they were.
	readAll := func() {
		t.Helper()
		if got := read("out.txt"); got != "out\n" {
			t.Errorf("out.txt = %q", got)
		}
		if _, err := ro.Stat(ctx, "", c.ID, "out.txt"); err != nil {
			t.Error(err)
		}
		if _, err := ro.Lstat(ctx, "", c.ID, "in.txt"); err != nil {
			t.Error(err)
		}
		if _, err := ro.ReadDir(ctx, "", c.ID, "", bothy.ReadDirOptions{}); err != nil {
			t.Error(err)
		}
		if _, err := ro.Glob(ctx, "", c.ID, "*.txt", 0); err != nil {
			t.Error(err)
		}
		if _, err := ro.Grep(ctx, "", c.ID, bothy.GrepOptions{Pattern: "out"}); err != nil {
			t.Error(err)
		}
	}
	before := revisions()
	if comp, err := ro.FindComputer(ctx, c.ID); err != nil || comp.State != bothy.StateActive {
		t.Fatalf("the computer is %+v, %v; want it active", comp, err)
	}
	readAll()
	if after := revisions(); len(after) != len(before) || after[0].Number != before[0].Number {
		t.Fatalf("a read-only token's reads of an unchanged active workspace made revisions: %d before (newest %d), %d after (newest %d by %s)",
			len(before), before[0].Number, len(after), after[0].Number, after[0].CreatedBy)
	}

	// A command that wrote and still runs: the read sees its write through
	// a checkpoint, whose revision is the lease's.
	cmd := e.run(t, c.ID, bothy.RunRequest{Script: "echo more > more.txt && echo written && exec sleep 600"})
	s, err := e.client.Events(ctx, cmd.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("events of %s: %v", cmd.ID, err)
		} else if ev.Kind == bothy.EventStdout {
			break
		}
	}
	s.Close()
	if got := read("more.txt"); got != "more\n" {
		t.Errorf("more.txt read while its command runs = %q", got)
	}
	running, err := e.client.GetCommand(ctx, cmd.ID)
	if err != nil {
		t.Fatal(err)
	}
	revs := revisions()
	if len(revs) != len(before)+1 || revs[0].CreatedBy != running.LeaseID || running.LeaseID == "" {
		t.Errorf("after a read of the command's write: %d revisions (was %d), newest by %q; want one more, by the lease %q",
			len(revs), len(before), revs[0].CreatedBy, running.LeaseID)
	}
	before = revs
	readAll()
	if after := revisions(); len(after) != len(before) {
		t.Errorf("reads again made %d revisions more", len(after)-len(before))
	}

	if _, err := e.client.CancelCommand(ctx, cmd.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.DestroyComputer(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	e.checkReleased(t, c.ID, 1)
}
