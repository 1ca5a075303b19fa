package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
)

// TestGlobalFlags: the flags of every verb over the API may come before
// the verb ("bothy --json ls"), and go to it as if typed after it.
func TestGlobalFlags(t *testing.T) {
	for _, tc := range []struct{ args, want []string }{
		{[]string{"--json", "ls"}, []string{"ls", "--json"}},
		{[]string{"-json", "get", "ID"}, []string{"get", "-json", "ID"}},
		{[]string{"--url", "http://x", "--token=T", "--json", "run", "ID", "ls", "-la"}, []string{"run", "--url", "http://x", "--token=T", "--json", "ID", "ls", "-la"}},
		{[]string{"--json=true", "wait", "C"}, []string{"wait", "--json=true", "C"}},
		{[]string{"ls", "--json"}, []string{"ls", "--json"}},
		{[]string{"help"}, []string{"help"}},
		{[]string{"--help"}, []string{"--help"}},
		{[]string{"--bogus", "ls"}, []string{"--bogus", "ls"}},
		{[]string{"--url"}, []string{"--url"}},
	} {
		if got := globalFlagsAfterVerb(tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("globalFlagsAfterVerb(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestCLI_FailedReason: wait and logs print why a command failed.
func TestCLI_FailedReason(t *testing.T) {
	a := newCLIAPI(t)
	id := strings.TrimSpace(callVerb(t, (*cli).create))
	cmdID := strings.TrimSpace(callVerb(t, (*cli).run, id, "--detach", "--cwd", "missing", "true"))
	<-a.fake.Started()
	cmd, err := a.store.FindCommand(t.Context(), "default", cmdID)
	if err != nil {
		t.Fatal(err)
	}
	const reason = `cwd "missing" is not a directory`
	if _, err := a.store.TransitionCommand(t.Context(), "default", cmdID, []string{bothy.CommandRunning}, bothy.CommandFailed,
		bothy.CommandUpdate{Generation: cmd.Generation, Error: reason}); err != nil {
		t.Fatal(err)
	}
	c, _, errb := testCLI("")
	wantExit(t, c.wait(t.Context(), []string{cmdID}), 1)
	if !strings.Contains(errb.String(), reason) {
		t.Errorf("wait printed %q to stderr, want the reason %q", errb, reason)
	}
	c, _, errb = testCLI("")
	err = c.logs(t.Context(), []string{cmdID})
	if !strings.Contains(errb.String(), reason) {
		t.Errorf("logs printed %q to stderr (%v), want the reason %q", errb, err, reason)
	}
}
