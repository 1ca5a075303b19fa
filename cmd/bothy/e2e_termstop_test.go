package main

import (
	"fmt"
	"io"
	nethttp "net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
)

// TestE2E_StopStormSIGTERM: 8 warm computers stopped at once, and serve
// SIGTERMed 100 to 500 ms later, while their final checkpoints, commits
// and release reports are in flight; three rounds. Every stop request
// gets an HTTP answer (the stop's, or 503), serve exits cleanly within its
// drain deadline, and the next serve runs every computer's next command
// over the files written before (a stop that could not finish left its
// lease whole for the next start, which resumes or discards it, never
// mounts over it). No supervisor outlives its lease directory, and at the
// end nothing is left.
func TestE2E_StopStormSIGTERM(t *testing.T) {
	needSandbox(t)
	data, s, a := serveAPI(t)
	var ids []string
	for range 8 {
		ids = append(ids, a.create("termstop").ID)
	}
	for round, delay := range []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond} {
		for i, id := range ids {
			script := fmt.Sprintf("echo %d-%d > round%d && cat round*", round, i, round)
			c := a.run(id, bothy.RunRequest{Script: script, Wait: true})
			if c.State != bothy.CommandCompleted {
				t.Fatalf("round %d: command on %s: %s %s", round, id, c.State, c.Error)
			}
		}
		var wg sync.WaitGroup
		answers := make([]string, len(ids))
		for i, id := range ids {
			wg.Go(func() { answers[i] = stopAnswer(s.url, a.c.Token, id) })
		}
		time.Sleep(delay)
		start := time.Now()
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- s.cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("round %d: serve exited with %v after SIGTERM", round, err)
			}
		case <-time.After(shutdownGrace + 10*time.Second):
			t.Fatalf("round %d: serve still runs %s after SIGTERM", round, time.Since(start))
		}
		wg.Wait()
		t.Logf("round %d (SIGTERM %s after the stops): answers %v; %d stops left whole for the next start", round, delay, answers,
			strings.Count(s.stderr.String(), "leaving it whole for the next start"))
		for i, ans := range answers {
			if ans != "200" && ans != "503" {
				t.Errorf("round %d: stop of %s answered %s, want 200 or 503", round, ids[i], ans)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		s = startServeWith(t, data, nil)
		a = newAPI(t, s, serverToken(t, s, data))
		var leases []string
		for i, id := range ids {
			c := a.run(id, bothy.RunRequest{Script: "cat round*", Wait: true})
			var want strings.Builder
			for r := 0; r <= round; r++ {
				fmt.Fprintf(&want, "%d-%d\n", r, i)
			}
			if c.State != bothy.CommandCompleted {
				t.Fatalf("round %d: command on %s after the restart: %s %s", round, id, c.State, c.Error)
			}
			if got := output(a.events(c.ID, 0, nil)); got != want.String() {
				t.Errorf("round %d: files of %s after the restart: %q, want %q", round, id, got, want.String())
			}
			leases = append(leases, c.LeaseID)
		}
		checkLeaseDirs(t, data, leases)
	}
	destroyAll(t, a, data)
	s.stop(t)
	checkNoResidue(t, data)
}

// stopAnswer stops a computer with raw HTTP and returns the status, or
// what became of a request that got none.
func stopAnswer(url, token, id string) string {
	req, _ := nethttp.NewRequest("POST", url+"/v1/computers/"+id+"/stop", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := nethttp.DefaultClient.Do(req)
	if err != nil {
		return "no answer: " + err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 || resp.StatusCode == 503 {
		return fmt.Sprint(resp.StatusCode)
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, body)
}

// checkLeaseDirs waits (bounded: a minute) until the agent's lease
// directories are those of leases, and fails if a process of the agent
// runs in a directory that is deleted or names a lease directory that is
// gone.
func checkLeaseDirs(t *testing.T, data string, leases []string) {
	t.Helper()
	want := slices.Sorted(slices.Values(leases))
	var got, orphans []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got = got[:0]
		ents, _ := os.ReadDir(filepath.Join(data, "agent", "leases"))
		for _, e := range ents {
			got = append(got, e.Name())
		}
		orphans = orphanProcesses(data)
		if slices.Equal(got, want) && len(orphans) == 0 {
			return
		} else if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("lease directories %v, want %v; orphan processes %v", got, want, orphans)
}

// orphanProcesses lists the processes of data's agent whose working
// directory is deleted, or whose command line names a lease directory
// that is gone.
func orphanProcesses(data string) []string {
	leases := filepath.Join(data, "agent", "leases") + "/"
	var out []string
	for _, pid := range processesMentioning(filepath.Join(data, "agent")) {
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		orphan := strings.HasSuffix(cwd, " (deleted)")
		if i := strings.Index(cmdline, leases); i >= 0 {
			id, _, _ := strings.Cut(cmdline[i+len(leases):], "/")
			id, _, _ = strings.Cut(id, " ")
			if _, err := os.Lstat(leases + id); err != nil {
				orphan = true
			}
		}
		if orphan && pidAlive(pid) {
			out = append(out, fmt.Sprintf("%d (cwd %s) %s", pid, cwd, cmdline))
		}
	}
	return out
}
