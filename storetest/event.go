package storetest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/bothyhq/bothy"
)

// out returns a stdout event with seq.
func out(seq int64, text string) bothy.Event {
	return bothy.Event{Seq: seq, Kind: bothy.EventStdout, Data: []byte(text)}
}

// outs returns stdout events with seqs from first to last, each holding "line <seq>".
func outs(first, last int64) []bothy.Event {
	evs := []bothy.Event{}
	for seq := first; seq <= last; seq++ {
		evs = append(evs, out(seq, fmt.Sprintf("line %d\n", seq)))
	}
	return evs
}

// mustAppend appends events.
func mustAppend(t *testing.T, s bothy.Store, commandID string, generation int64, evs []bothy.Event) {
	t.Helper()
	if err := s.AppendEvents(t.Context(), "acme", commandID, generation, evs); err != nil {
		t.Fatalf("AppendEvents(%s generation %d): %v", commandID, generation, err)
	}
}

// listEvents returns the events of acme's command after afterSeq.
func listEvents(t *testing.T, s bothy.Store, commandID string, afterSeq int64, limit int) []*bothy.Event {
	t.Helper()
	evs, err := s.ListEvents(t.Context(), "acme", commandID, afterSeq, limit)
	if err != nil {
		t.Fatalf("ListEvents(%s after %d): %v", commandID, afterSeq, err)
	}
	return evs
}

// checkJournal fails the test unless the command's events are exactly want,
// numbered from 1, and its LastSeq is the last of them.
func checkJournal(t *testing.T, s bothy.Store, commandID string, want []bothy.Event) {
	t.Helper()
	got := listEvents(t, s, commandID, 0, 1000)
	if len(got) != len(want) {
		t.Fatalf("command %s holds %d events, want %d", commandID, len(got), len(want))
	}
	for i, e := range got {
		if e.Seq != int64(i+1) || !e.SameContent(&want[i]) || e.TenantID != "acme" || e.CommandID != commandID {
			t.Errorf("event %d = %+v, want seq %d %s %q %s", i, e, i+1, want[i].Kind, want[i].Data, want[i].Fields)
		}
		if e.CreatedAt.IsZero() || e.CreatedAt.Location() != bothy.Now().Location() {
			t.Errorf("event %d CreatedAt = %v", e.Seq, e.CreatedAt)
		}
	}
	if c := mustFindCommand(t, s, "acme", commandID); c.LastSeq != int64(len(want)) {
		t.Errorf("LastSeq = %d, want %d", c.LastSeq, len(want))
	}
}

func testEvents(t *testing.T, open opener) {
	run(t, "AppendEvents/Assign", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		first := []bothy.Event{out(0, "a"), {Kind: bothy.EventStderr, Data: []byte("b")}, {Kind: bothy.EventState, Fields: `{"state":"running"}`}}
		mustAppend(t, s, "cmd1", 1, first)
		for i, e := range first {
			if e.Seq != int64(i+1) || e.CreatedAt.IsZero() {
				t.Errorf("event %d written back as seq %d at %v", i, e.Seq, e.CreatedAt)
			}
		}
		second := []bothy.Event{out(0, "c"), {Kind: bothy.EventExit, Fields: `{"exit_code":0}`}}
		mustAppend(t, s, "cmd1", 1, second)
		if second[0].Seq != 4 || second[1].Seq != 5 {
			t.Errorf("second batch got seqs %d, %d; want 4, 5", second[0].Seq, second[1].Seq)
		}
		checkJournal(t, s, "cmd1", append(first, second...))
	})

	run(t, "AppendEvents/Verify", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustAppend(t, s, "cmd1", 1, outs(1, 3))
		mustAppend(t, s, "cmd1", 1, outs(4, 4))
		mustAppend(t, s, "cmd1", 1, []bothy.Event{{Seq: 5, Kind: bothy.EventStdout}}) // no data
		checkJournal(t, s, "cmd1", append(outs(1, 4), bothy.Event{Kind: bothy.EventStdout}))
	})

	run(t, "AppendEvents/Resend", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustAppend(t, s, "cmd1", 1, outs(1, 3))
		// A runtime re-sends after a reconnect: the stored part is a no-op.
		mustAppend(t, s, "cmd1", 1, outs(1, 3))
		mustAppend(t, s, "cmd1", 1, outs(2, 2))
		checkJournal(t, s, "cmd1", outs(1, 3))
		mustAppend(t, s, "cmd1", 1, outs(2, 5))
		checkJournal(t, s, "cmd1", outs(1, 5))
	})

	run(t, "AppendEvents/ConcurrentResend", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { errs[i] = s.AppendEvents(t.Context(), "acme", "cmd1", 1, outs(1, 5)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("sender %d: %v", i, err)
			}
		}
		checkJournal(t, s, "cmd1", outs(1, 5))
	})

	run(t, "AppendEvents/ConcurrentAssign", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		const n, each = 6, 5
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				for range each {
					if err := s.AppendEvents(t.Context(), "acme", "cmd1", 0, []bothy.Event{out(0, "x")}); err != nil {
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("appender %d: %v", i, err)
			}
		}
		want := []bothy.Event{}
		for range n * each {
			want = append(want, out(0, "x"))
		}
		checkJournal(t, s, "cmd1", want)
	})

	run(t, "AppendEvents/ErrGap", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustAppend(t, s, "cmd1", 1, outs(1, 3))
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", 1, outs(5, 6)), bothy.EINVALID)
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", 1, []bothy.Event{out(4, "a"), out(6, "b")}), bothy.EINVALID)
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", 1, []bothy.Event{out(0, "a"), out(5, "b")}), bothy.EINVALID)
		checkJournal(t, s, "cmd1", outs(1, 3))
	})

	run(t, "AppendEvents/ErrOtherContent", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustAppend(t, s, "cmd1", 1, outs(1, 3))
		for name, evs := range map[string][]bothy.Event{
			"data":   {out(2, "other")},
			"kind":   {{Seq: 2, Kind: bothy.EventStderr, Data: []byte("line 2\n")}},
			"fields": {{Seq: 3, Kind: bothy.EventStdout, Data: []byte("line 3\n"), Fields: `{}`}},
			// The new event 4 is not stored when 3 differs.
			"with new": append([]bothy.Event{out(3, "other")}, outs(4, 4)...),
		} {
			if err := s.AppendEvents(t.Context(), "acme", "cmd1", 1, evs); bothy.ErrorCode(err) != bothy.ECONFLICT {
				t.Errorf("%s: error %v, want code %q", name, err, bothy.ECONFLICT)
			}
		}
		checkJournal(t, s, "cmd1", outs(1, 3))
	})

	run(t, "AppendEvents/ErrInvalid", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		for name, evs := range map[string][]bothy.Event{
			"kind":     {{Kind: "stdin", Data: []byte("x")}},
			"fields":   {{Kind: bothy.EventState, Fields: "{oops"}},
			"negative": {{Seq: -1, Kind: bothy.EventStdout}},
		} {
			if err := s.AppendEvents(t.Context(), "acme", "cmd1", 1, evs); bothy.ErrorCode(err) != bothy.EINVALID {
				t.Errorf("%s: error %v, want code %q", name, err, bothy.EINVALID)
			}
		}
		big := []bothy.Event{{Kind: bothy.EventStdout, Data: make([]byte, bothy.MaxEventData+1)}}
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", 1, big), bothy.ETOOLARGE)
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", -1, outs(1, 1)), bothy.EINVALID)
		checkJournal(t, s, "cmd1", nil)
	})

	run(t, "AppendEvents/ErrStaleGeneration", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustAppend(t, s, "cmd1", 1, outs(1, 2))
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", 2, outs(3, 3)), bothy.ECONFLICT)
		// Released, then the computer moves on: generation 1 may not write,
		// not even a re-send, and generation 2 did not run this command.
		if err := s.ReleaseLease(t.Context(), "acme", "l1", 1, bothy.LeaseLost, ""); err != nil {
			t.Fatal(err)
		}
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", 1, outs(3, 3)), bothy.ECONFLICT)
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", 1, outs(1, 2)), bothy.ECONFLICT)
		mustAcquire(t, s, newLease("acme", "c1", "l2", 2))
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", 1, outs(3, 3)), bothy.ECONFLICT)
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", 2, outs(3, 3)), bothy.ECONFLICT)
		checkJournal(t, s, "cmd1", outs(1, 2))
		// The control plane records what happened, unfenced.
		lost := []bothy.Event{{Kind: bothy.EventState, Fields: `{"state":"lost"}`}}
		mustAppend(t, s, "cmd1", 0, lost)
		checkJournal(t, s, "cmd1", append(outs(1, 2), lost...))
	})

	run(t, "AppendEvents/ErrNotDispatched", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustCreateCommand(t, s, newCommand("acme", "c1", "cmd2", ""))
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd2", 1, outs(1, 1)), bothy.ECONFLICT)
		checkJournal(t, s, "cmd2", nil)
	})

	run(t, "AppendEvents/Terminal", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandDispatched}, bothy.CommandRunning, bothy.CommandUpdate{Generation: 1})
		mustAppend(t, s, "cmd1", 1, outs(1, 2))
		mustTransition(t, s, "acme", "cmd1", []string{bothy.CommandRunning}, bothy.CommandCompleted, bothy.CommandUpdate{Generation: 1})
		mustAppend(t, s, "cmd1", 1, outs(1, 2)) // a late re-send is still a no-op
		WantCode(t, s.AppendEvents(t.Context(), "acme", "cmd1", 1, outs(3, 3)), bothy.ECONFLICT)
		checkJournal(t, s, "cmd1", outs(1, 2))
	})

	run(t, "AppendEvents/Truncated", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustAppend(t, s, "cmd1", 1, outs(1, 1))
		if c := mustFindCommand(t, s, "acme", "cmd1"); c.Truncated {
			t.Error("Truncated before any truncated event")
		}
		mustAppend(t, s, "cmd1", 1, []bothy.Event{{Seq: 2, Kind: bothy.EventTruncated, Fields: `{"dropped_bytes":1024}`}})
		if c := mustFindCommand(t, s, "acme", "cmd1"); !c.Truncated || c.LastSeq != 2 {
			t.Errorf("Truncated %v LastSeq %d after a truncated event, want true 2", c.Truncated, c.LastSeq)
		}
	})

	run(t, "AppendEvents/ErrNotFound", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustCreateTenant(t, s, "other")
		WantCode(t, s.AppendEvents(t.Context(), "acme", "nope", 1, outs(1, 1)), bothy.ENOTFOUND)
		WantCode(t, s.AppendEvents(t.Context(), "other", "cmd1", 1, outs(1, 1)), bothy.ENOTFOUND)
		WantCode(t, s.AppendEvents(t.Context(), "other", "cmd1", 0, outs(1, 1)), bothy.ENOTFOUND)
		checkJournal(t, s, "cmd1", nil)
	})

	run(t, "ListEvents/Resume", func(t *testing.T) {
		s, _ := journalSetup(t, open)
		mustCreateTenant(t, s, "other")
		mustAppend(t, s, "cmd1", 1, outs(1, 10))
		for _, tt := range []struct {
			after       int64
			limit       int
			first, last int64
		}{
			{0, 3, 1, 3}, {3, 3, 4, 6}, {6, 0, 7, 10}, {9, 5, 10, 10}, {10, 5, 11, 10}, {20, 0, 21, 20},
		} {
			got := listEvents(t, s, "cmd1", tt.after, tt.limit)
			if int64(len(got)) != tt.last-tt.first+1 {
				t.Fatalf("after %d limit %d: %d events, want %d to %d", tt.after, tt.limit, len(got), tt.first, tt.last)
			}
			for i, e := range got {
				want := out(tt.first+int64(i), fmt.Sprintf("line %d\n", tt.first+int64(i)))
				if e.Seq != want.Seq || !bytes.Equal(e.Data, want.Data) {
					t.Errorf("after %d: event %d = seq %d %q, want %d %q", tt.after, i, e.Seq, e.Data, want.Seq, want.Data)
				}
			}
		}
		_, err := s.ListEvents(t.Context(), "acme", "cmd1", -1, 0)
		WantCode(t, err, bothy.EINVALID)
		_, err = s.ListEvents(t.Context(), "acme", "cmd1", 0, -1)
		WantCode(t, err, bothy.EINVALID)
		if evs, err := s.ListEvents(t.Context(), "other", "cmd1", 0, 0); err != nil || len(evs) != 0 {
			t.Errorf("another tenant listed %d events (err %v)", len(evs), err)
		}
		if evs := listEvents(t, s, "nope", 0, 0); len(evs) != 0 {
			t.Errorf("a missing command listed %d events", len(evs))
		}
	})
}
