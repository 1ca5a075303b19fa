package bench

// An internal test: BenchmarkRunTrue and TestRunRuntime drive the
// embedded server the bench builds (startServer), which is not exported.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/bwrap"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/process"
	"github.com/bothyhq/bothy/supervisor"
	"github.com/bothyhq/bothy/testenv"
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
	testenv.Root(tb, "the runtime bench needs root (bubblewrap, cgroups, overlayfs)")
	provs := testProviders()
	if len(provs) < 2 {
		testenv.Skip(tb, "the bwrap provider is unavailable here (scripts/sandbox-deps)")
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
	rt.Skipped = []Skip{{npmScenario, "not run by --quick"}}
	adm := &AdmissionReport{Ops: 10, Rounds: 1, Workers: []int{1, 8}, Busy: 1000, Skipped: []Skip{{"admission on PostgreSQL", "no server"}}}
	for _, k := range admissionKinds {
		adm.Figures = append(adm.Figures, newFigure("admission_sqlite_"+k.Key+"_w1", "ops/s", []float64{900}), newFigure("admission_sqlite_"+k.Key+"_w8", "ops/s", []float64{1000}))
	}
	r := &Report{Command: "bothy bench", Runtime: rt, Admission: adm}
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
		"command stream broke", "![perf-goals](perf-goals.png)", "go run ./cmd/bothy bench",
		"| not measured | — | — | ≤ 1.15x | skipped: not run by --quick |", "## Skipped", "- **admission on PostgreSQL**: no server",
		"| `RunCommand` on a cold computer (admits the command and reserves a lease) | 900 / 1000 | skipped / skipped |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if missed, _, _ := strings.Cut(strings.SplitN(md.String(), "Missed: ", 2)[1], "\n"); strings.Contains(missed, "npm") {
		t.Errorf("a skipped goal is listed as missed: %s", missed)
	}
}

// TestRunRuntime runs two scenarios end to end against a real embedded
// server and checks that teardown leaves nothing.
func TestRunRuntime(t *testing.T) {
	testenv.Short(t, "starts sandboxes")
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

func TestOpCounter(t *testing.T) {
	c := newOpCounter()
	a, b := c.begin("start"), c.begin("start")
	a()
	d := c.begin("start")
	b()
	d()
	peak, took := c.reset()
	if peak["start"] != 2 || len(took["start"]) != 3 {
		t.Errorf("peak %v, took %v; want a peak of 2 and 3 durations", peak, took)
	}
	if peak, _ := c.reset(); peak["start"] != 0 {
		t.Errorf("after reset, peak %v", peak)
	}
}

func TestCounted(t *testing.T) {
	for _, p := range testProviders() {
		c, hidden := counted(p, newOpCounter())
		if len(hidden) > 0 {
			// A new optional method: the bench counts nothing rather
			// than hide it, and says so.
			if c != p {
				t.Errorf("%s: wrapped although the wrapper hides %v", p.Name(), hidden)
			}
			t.Logf("%s: not counted, the wrapper would hide %v", p.Name(), hidden)
			continue
		}
		if _, ok := c.(*countedProvider); !ok {
			if _, ok := c.(bothy.WorkspaceOwner); !ok {
				t.Errorf("%s: not wrapped, and no hidden method given", p.Name())
			}
		}
		if _, ok := p.(bothy.WorkspaceOwner); ok {
			if _, ok := c.(bothy.WorkspaceOwner); !ok {
				t.Errorf("%s: the counted provider lost WorkspaceOwner", p.Name())
			}
		}
		if h := hiddenMethods(p, c); len(h) > 0 {
			t.Errorf("%s: the counted provider hides %v", p.Name(), h)
		}
		if c.Name() != p.Name() {
			t.Errorf("name %q, want %q", c.Name(), p.Name())
		}
	}
}

func TestParseNpm(t *testing.T) {
	rep := &RuntimeReport{}
	t.Run("OK", func(t *testing.T) {
		d, err := parseNpm("noise\nnpm_ci 100.000000 119.500000 26799\n", 26799, rep)
		if err != nil || d < 19.49 || d > 19.51 {
			t.Errorf("parseNpm = %v, %v; want 19.5 s", d, err)
		}
		if len(rep.Notes) != 0 {
			t.Errorf("notes %q", rep.Notes)
		}
	})
	t.Run("OtherCount", func(t *testing.T) {
		if _, err := parseNpm("npm_ci 100.000000 101.000000 5\n", 26799, rep); err != nil || len(rep.Notes) != 1 {
			t.Errorf("err %v, notes %q; want one note", err, rep.Notes)
		}
	})
	t.Run("ErrNoLine", func(t *testing.T) {
		if _, err := parseNpm("added 550 packages\n", 1, rep); err == nil {
			t.Error("output without a timing line was accepted")
		}
	})
}

func TestNpmError(t *testing.T) {
	out := []byte("npm error code ENOTFOUND\nnpm error request to https://example.org/react failed\nnpm error getaddrinfo ENOTFOUND packages.example.com\n")
	msg := npmError(errors.New("exit status 1"), out)
	if strings.Contains(msg, "example") || !strings.Contains(msg, "ENOTFOUND") {
		t.Errorf("npmError = %q: want the error without its addresses", msg)
	}
}

// TestNpmSet checks the embedded dependency set: a lockfile of the
// package.json, with every package pinned by integrity and no registry
// named (npm resolves against its configured one).
func TestNpmSet(t *testing.T) {
	var lock struct {
		LockfileVersion int                       `json:"lockfileVersion"`
		Packages        map[string]map[string]any `json:"packages"`
	}
	if err := json.Unmarshal(npmPackageLock, &lock); err != nil {
		t.Fatal(err)
	}
	if len(lock.Packages) < 500 {
		t.Errorf("the lockfile holds %d packages", len(lock.Packages))
	}
	for k, p := range lock.Packages {
		if k == "" {
			continue
		}
		if _, ok := p["resolved"]; ok {
			t.Errorf("%s: the lockfile names where it was resolved", k)
		}
		if _, ok := p["integrity"]; !ok && p["link"] == nil {
			t.Errorf("%s: no integrity", k)
		}
	}
	var set NpmSet
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := set.describe(dir, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if len(set.Direct) < 10 || set.Packages < 500 {
		t.Errorf("set %+v", set)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{7: "7", 999: "999", 1000: "1,000", 36675: "36,675", 1234567: "1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParallel(t *testing.T) {
	var n atomic.Int64
	if err := parallel(4, 100, func(int) error { n.Add(1); return nil }); err != nil || n.Load() != 100 {
		t.Errorf("parallel ran %d, err %v", n.Load(), err)
	}
	if err := parallel(4, 100, func(i int) error {
		if i == 10 {
			return errors.New("boom")
		}
		return nil
	}); err == nil || err.Error() != "boom" {
		t.Errorf("parallel err %v, want boom", err)
	}
}

// TestRunAdmission runs the admission bench on SQLite, and on PostgreSQL
// when BOTHY_TEST_POSTGRES_URL names a server.
func TestRunAdmission(t *testing.T) {
	rep, err := RunAdmission(context.Background(), AdmissionOptions{WorkDir: t.TempDir(), Postgres: os.Getenv(EnvPostgresURL),
		PostgresSkip: "unset", Ops: 20, Rounds: 1, Workers: []int{1, 4}, Busy: 30})
	if err != nil {
		t.Fatal(err)
	}
	stores := []string{"sqlite"}
	if os.Getenv(EnvPostgresURL) != "" {
		stores = append(stores, "postgres")
	} else if len(rep.Skipped) != 1 || rep.Skipped[0].Reason != "unset" {
		t.Errorf("skipped %+v", rep.Skipped)
	}
	for _, store := range stores {
		for _, k := range admissionKinds {
			for _, w := range []int{1, 4} {
				if f := rep.Figure(fmt.Sprintf("admission_%s_%s_w%d", store, k.Key, w)); len(f.Runs) != 1 || f.Median <= 0 {
					t.Errorf("%s %s w%d: %+v", store, k.Key, w, f)
				}
			}
		}
	}
}
