package main

import (
	"bytes"
	"encoding/json"
	nethttp "net/http"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/control"
)

// postDying sends a POST to a server that is meant to die handling it (a
// fault injection): there is no answer to check.
func (a *apiClient) postDying(path string, body any) {
	a.t.Helper()
	j, _ := json.Marshal(body)
	req, _ := nethttp.NewRequest("POST", a.c.URL+path, bytes.NewReader(j))
	req.Header.Set("Authorization", "Bearer "+a.c.Token)
	if resp, err := nethttp.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// reaped is what the reaper logs of a lease whose TTL ran out.
const reaped = "its runtime stopped polling"

// TestE2E_CrashDuringColdStart kills `bothy serve` during a cold
// computer's first command: at once after the POST answered (wherever the
// lease's start then is), after the command was admitted and before a
// lease was reserved, and after the lease was reserved and before the
// agent heard of it. Each time an earlier command on another computer has
// shown the in-process agent polling, so leases are placed on it. After a
// restart the command runs exactly once, and within 30 s: the lease the
// agent does not hold is released at its first poll, not by the reaper
// after the 60 s TTL (a correctness bound, not a speed figure).
func TestE2E_CrashDuringColdStart(t *testing.T) {
	needSandbox(t)
	for _, tc := range []struct{ name, fault, log string }{
		{"at_once", "", ""},
		{"after_admit", "after_admit#2", ""},
		{"after_lease_acquired", "after_lease_acquired#2", "its agent does not hold it after a restart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			var env []string
			if tc.fault != "" {
				env = []string{"BOTHY_FAULT=" + tc.fault}
			}
			s := startServeWith(t, data, env)
			tok := serverToken(t, s, data)
			a := newAPI(t, s, tok)
			warm := a.create("warm")
			if cmd := a.run(warm.ID, bothy.RunRequest{Argv: []string{"true"}, Wait: true}); cmd.State != bothy.CommandCompleted {
				t.Fatalf("warm-up command: %s", cmd.State)
			}
			c := a.create("cold")
			req := bothy.RunRequest{Script: "echo run >> counter; echo ran", IdempotencyKey: "k1"}
			if tc.fault == "" {
				if st, raw := a.call("POST", "/v1/computers/"+c.ID+"/commands", req, nil); st != 201 {
					t.Fatalf("run: %d %s", st, raw)
				}
				s.kill9(t)
			} else {
				a.postDying("/v1/computers/"+c.ID+"/commands", req)
				s.waitExit(t)
			}

			s = startServeWith(t, data, nil)
			restarted := time.Now()
			a = newAPI(t, s, tok)
			first := a.run(c.ID, req) // the key names the command admitted before the crash
			done := a.wait(first.ID)
			took := time.Since(restarted)
			t.Logf("after the restart the command ended in %v (%s, generation %d)", took.Round(time.Millisecond), done.State, done.Generation)
			if done.State != bothy.CommandCompleted {
				t.Fatalf("after the restart the command is %s (%s)", done.State, done.Error)
			}
			if took > 30*time.Second {
				t.Errorf("the command ended %v after the restart, past the 30 s bound (the lease TTL is 60 s)", took)
			}
			logs := s.stderr.String()
			if strings.Contains(logs, reaped) {
				t.Errorf("the restarted server waited out a lease's TTL:\n%s", logs)
			}
			if tc.log != "" && !strings.Contains(logs, tc.log) {
				t.Errorf("the restarted server did not log %q:\n%s", tc.log, logs)
			}
			if got := a.readFile(c.ID, "counter"); got != "run\n" {
				t.Fatalf("counter = %q, want exactly one run", got)
			}
			destroyAll(t, a, data)
			s.stop(t)
		})
	}
}

// TestE2E_CrashBeforeDispatch kills `bothy serve` after a warm computer's
// command was admitted and before it was dispatched. The restarted agent
// resumes the lease it found on disk; the new process dispatches the
// command once the lease is ready again, not into the resume (where the
// agent would drop it, and the control plane ask only after the
// acknowledgement timeout, 15 s, and hear never_seen).
func TestE2E_CrashBeforeDispatch(t *testing.T) {
	needSandbox(t)
	data := t.TempDir()
	s := startServeWith(t, data, []string{"BOTHY_FAULT=after_admit#2"})
	tok := serverToken(t, s, data)
	a := newAPI(t, s, tok)
	c := a.create("warm")
	if cmd := a.run(c.ID, bothy.RunRequest{Argv: []string{"true"}, Wait: true}); cmd.State != bothy.CommandCompleted {
		t.Fatalf("first command: %s", cmd.State)
	}
	req := bothy.RunRequest{Script: "echo run >> counter; echo ran", IdempotencyKey: "k1"}
	a.postDying("/v1/computers/"+c.ID+"/commands", req)
	s.waitExit(t)

	s = startServeWith(t, data, nil)
	restarted := time.Now()
	a = newAPI(t, s, tok)
	first := a.run(c.ID, req)
	done := a.wait(first.ID)
	took := time.Since(restarted)
	t.Logf("after the restart the command ended in %v (%s, generation %d)", took.Round(time.Millisecond), done.State, done.Generation)
	if done.State != bothy.CommandCompleted {
		t.Fatalf("after the restart the command is %s (%s)", done.State, done.Error)
	}
	if logs := s.stderr.String(); strings.Contains(logs, "never reached its runtime") {
		t.Errorf("the command was dispatched into the lease's resume, dropped, and asked about after the acknowledgement timeout:\n%s", logs)
	}
	if took >= control.DefaultAckTimeout {
		t.Errorf("the command ended %v after the restart, past the acknowledgement timeout", took)
	}
	if got := a.readFile(c.ID, "counter"); got != "run\n" {
		t.Fatalf("counter = %q, want exactly one run", got)
	}
	destroyAll(t, a, data)
	s.stop(t)
}
