package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bothyhq/bothy/hostcache"
	"github.com/bothyhq/bothy/supervisor"
)

// TestWatchScratch: a command is judged only by what the layer did while
// it ran. A, which overflowed the limit and ended, leaves the next
// command B (which only deletes) alone; C, which grows the layer past
// the limit while it runs, is cancelled for the scratch limit.
func TestWatchScratch(t *testing.T) {
	upper := t.TempDir()
	write := func(name string, n int) {
		if err := os.WriteFile(filepath.Join(upper, name), make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := &lease{a: &Agent{log: slog.New(slog.DiscardHandler)}, state: leaseReady, ws: &hostcache.Overlay{Upper: upper},
		sup: &supervisor.Client{}, pumps: map[string]bool{"A": true}}
	var mu sync.Mutex
	cancelled := map[string]bool{}
	cancel := func(_ context.Context, _ *supervisor.Client, id string) error {
		mu.Lock()
		defer mu.Unlock()
		cancelled[id] = true
		return nil
	}
	set := func(f func()) {
		l.mu.Lock()
		defer l.mu.Unlock()
		f()
	}
	killed := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return cancelled[id]
	}
	write("small", 10<<10)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go l.watchScratch(ctx, 100<<10, cancel)
	time.Sleep(3 * minScratchPeriod / 2) // a sample while A runs
	set(func() { delete(l.pumps, "A") })
	for _, name := range []string{"f0", "f1", "f2", "f3"} {
		write(name, 50<<10) // A's burst, past the limit, as it ends
	}
	time.Sleep(3 * minScratchPeriod / 2)
	set(func() { l.pumps["B"] = true })
	os.Remove(filepath.Join(upper, "f0"))
	time.Sleep(5 * minScratchPeriod / 2)
	if killed("B") {
		t.Fatal("the watcher cancelled B, which only shrank the layer")
	}
	set(func() { delete(l.pumps, "B"); l.pumps["C"] = true })
	time.Sleep(3 * minScratchPeriod / 2) // C's baseline
	for i := range 10 {
		write("c"+string(rune('0'+i)), 20<<10)
		time.Sleep(minScratchPeriod / 4)
	}
	time.Sleep(3 * minScratchPeriod / 2)
	if !killed("C") {
		t.Fatalf("C grew the layer to %d bytes past the limit while it ran and was not cancelled", l.ws.WrittenBytes())
	}
}
