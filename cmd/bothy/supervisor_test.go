package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/supervisor"
)

// TestSupervisor runs `bothy supervisor` the way an agent will: a process
// lease, Init, Spawn of this binary as the supervisor, then a command.
func TestSupervisor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws := t.TempDir()
	h, err := process.New().Start(ctx, bothy.LeaseSpec{LeaseID: "lease1", ComputerID: "c1", Generation: 1, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "sup")
	if err := supervisor.Init(dir, h); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envRunMain, "1")
	_, socket, err := supervisor.Spawn(ctx, os.Args[0], []string{"supervisor"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := supervisor.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		c.Shutdown(context.Background())
		c.Close()
	}()
	if _, err := c.Run(ctx, "cmd1", bothy.RunSpec{Script: "echo hello > out.txt; echo done"}); err != nil {
		t.Fatal(err)
	}
	events, err := c.Events(ctx, "cmd1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	var out strings.Builder
	var exit bool
	for !exit {
		ev, err := events.Next()
		if err != nil {
			t.Fatalf("events: %v (so far %q)", err, out.String())
		}
		switch ev.Kind {
		case bothy.EventStdout:
			out.Write(ev.Data)
		case bothy.EventExit:
			exit = true
		}
	}
	if out.String() != "done\n" {
		t.Errorf("stdout = %q, want %q", out.String(), "done\n")
	}
	st, err := c.Status(ctx, "cmd1")
	if err != nil {
		t.Fatal(err)
	} else if st.Exit == nil || st.Exit.ExitCode != 0 {
		t.Errorf("status = %+v, want exit 0", st)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("out.txt = %q, %v", b, err)
	}
}
