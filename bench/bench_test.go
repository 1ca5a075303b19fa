package bench

// An internal test: BenchmarkRunTrue and TestRunRuntime drive the
// embedded server the bench builds (startServer), which is not exported.

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/bwrap"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/supervisor"
)

// TestMain makes the test binary a supervisor too, as the bothy binary is
// (`bothy supervisor -dir DIR`), so that the runtime tests can spawn one
// per lease.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "supervisor" {
		os.Exit(supervisor.Main(os.Args[2:], testProviders()...))
	}
	os.Exit(m.Run())
}

func testProviders() []bothy.Provider {
	list := []bothy.Provider{process.New()}
	if p, err := bwrap.New(bwrap.Options{}); err == nil {
		list = append(list, p)
	}
	return list
}

// runtimeOptions returns options for the runtime tests, or skips unless
// the test runs as root on a host where bwrap works.
func runtimeOptions(tb testing.TB) RuntimeOptions {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("the runtime bench needs root (bubblewrap, cgroups, overlayfs)")
	}
	provs := testProviders()
	if len(provs) < 2 {
		tb.Skip("the bwrap provider is unavailable here (scripts/sandbox-deps)")
	}
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return RuntimeOptions{Providers: provs, SupervisorCommand: []string{exe, "supervisor"}, WorkDir: tb.TempDir()}
}

func TestPercentile(t *testing.T) {
	runs := make([]float64, 200)
	for i := range runs {
		runs[len(runs)-1-i] = float64(i + 1)
	}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 100}, {0.99, 198}, {1, 200}, {0, 1}} {
		if got := percentile(runs, c.q); got != c.want {
			t.Errorf("percentile(1..200, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	f := newLatency("x", "ms", runs)
	if f.Median != 100.5 || f.P99 != 198 || f.Min != 1 || f.Max != 200 {
		t.Errorf("newLatency = median %v p99 %v min %v max %v", f.Median, f.P99, f.Min, f.Max)
	}
	if percentile(nil, 0.99) != 0 {
		t.Error("percentile of no runs is not 0")
	}
}

func TestParseEpoch(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		got, err := parseEpoch("1796219780.805971\n")
		if err != nil || !got.Equal(time.Unix(1796219780, 805971000)) {
			t.Fatalf("parseEpoch = %v, %v", got, err)
		}
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		for _, s := range []string{"", "1796219780", "1796219780.8059", "x.123456"} {
			if _, err := parseEpoch(s); err == nil {
				t.Errorf("parseEpoch(%q) succeeded", s)
			}
		}
	})
}

func TestParseSteps(t *testing.T) {
	var out strings.Builder
	for _, op := range FileOps {
		out.WriteString(op.Key + " 100.000000 100.250000\n")
	}
	runs := map[string][]float64{}
	if err := parseSteps(out.String(), runs); err != nil {
		t.Fatal(err)
	}
	if got := runs["git_clone"]; len(got) != 1 || got[0] < 249.9 || got[0] > 250.1 {
		t.Errorf("git_clone = %v, want [250]", got)
	}
	if err := parseSteps("create_1000 1.000000 2.000000\n", runs); err == nil {
		t.Error("a script that reported one step was accepted")
	}
}

// TestReport_WriteMarkdown checks the report of made-up figures: every
// goal in the summary, misses explained, charts drawn.
func TestReport_WriteMarkdown(t *testing.T) {
	fig := func(name string, v float64) Figure { return newLatency(name, "ms", []float64{v, v * 1.1, v * 0.9}) }
	rt := &RuntimeReport{WorkspaceFiles: 100, WorkspaceBytes: 10 << 20, LogWarnings: map[string]int{"WARN: command stream broke; resuming": 3}}
	rt.Figures = []Figure{fig("baseline_bwrap_true", 5), fig("bothy_api_true", 25), fig("bothy_cold_start_warm_cache", 90),
		fig("bothy_stream_latency", 2), fig("baseline_pipe_stream_latency", 0.1), fig("bothy_create_30_computers", 9),
		fig("baseline_healthz_x30", 4), fig("host_stat_1000", 10), fig("bothy_stat_1000", 70)}
	for _, ph := range phaseNames {
		rt.Figures = append(rt.Figures, fig("bothy_api_true_"+ph, 3))
	}
	r := &Report{Command: "bothy bench", Runtime: rt}
	r.Finish(time.Minute)
	met := map[string]bool{}
	for _, g := range r.Goals {
		met[g.Figure] = g.Met
	}
	if met["bothy_api_true"] || !met["bothy_cold_start_warm_cache"] || !met["bothy_stream_latency"] || met["bothy_stat_1000"] {
		t.Errorf("goals met: %v", met)
	}
	dir := t.TempDir()
	if err := r.WriteCharts(filepath.Join(dir, "perf")); err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Charts {
		f, err := os.Open(filepath.Join(dir, c))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s: %v", c, err)
		}
		f.Close()
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| warm `true` through the API | 25.0 ms", "## Where the goals are missed", "/etc/passwd",
		"command stream broke", "![perf-goals](perf-goals.png)", "go run ./cmd/bothy bench"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

// TestRunRuntime runs two scenarios end to end against a real embedded
// server and checks that teardown leaves nothing.
func TestRunRuntime(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sandboxes")
	}
	opts := runtimeOptions(t)
	opts.Only, opts.WarmRuns, opts.FanOutRuns = "warm,30 computers", 3, 1
	rep, err := RunRuntime(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Figure("bothy_api_true").Runs) != 3 || len(rep.Figure("bothy_create_30_computers").Runs) != 1 {
		t.Errorf("figures: %+v", rep.Figures)
	}
	if len(rep.Residue) > 0 {
		t.Errorf("teardown left %q", rep.Residue)
	}
}

// BenchmarkRunTrue is `true` through the API on a warm computer, as the
// bench's first scenario measures it. It needs root.
func BenchmarkRunTrue(b *testing.B) {
	opts := runtimeOptions(b)
	ctx := context.Background()
	e, err := startServer(ctx, filepath.Join(opts.WorkDir, "data"), &opts)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if residue, err := e.Close(ctx); err != nil || len(residue) > 0 {
			b.Errorf("close: %v, residue %q", err, residue)
		}
	}()
	c, err := e.create(ctx, bhttp.CreateComputerRequest{Label: "bench-true"})
	if err != nil {
		b.Fatal(err)
	}
	req := bothy.RunRequest{Argv: []string{"true"}}
	if _, err := e.run(ctx, c.ID, req); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := e.run(ctx, c.ID, req); err != nil {
			b.Fatal(err)
		}
	}
}
