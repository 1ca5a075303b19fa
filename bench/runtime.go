package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
)

// RuntimeOptions configure RunRuntime. Zero counts take the full run's
// defaults; QuickRuntime holds a smoke run's.
type RuntimeOptions struct {
	// Providers and SupervisorCommand are those of the in-process agent,
	// as `bothy serve` has them; the supervisor is the bothy binary.
	Providers         []bothy.Provider
	SupervisorCommand []string
	// CLI is the bothy binary, whose `bothy run ID -- true` is timed as a
	// subprocess; "" leaves that figure out.
	CLI      string
	WorkDir  string    // scratch space: the server's data directory and host baselines
	Progress io.Writer // progress lines; nil discards

	WarmRuns    int // runs of `true` through the API and of each baseline (200)
	CLIRuns     int // runs of `bothy run ID -- true` (50)
	ColdRuns    int // cold starts with a warm and with a cold host cache (10 each)
	StreamRuns  int // runs of the stream scenario (3)
	StreamLines int // lines per stream run, one every 20 ms (100)
	FanOutRuns  int // rounds of 30 computers created (5)
	EditRuns    int // commands with and without an edit (10 each)
	FileOpsRuns int // runs of the file-operation script in a computer and on the host (5); -1 skips

	// LargeTree is a generated tree (the storage bench's) for cold starts
	// of a large workspace; "" skips them.
	LargeTree      string
	LargeRuns      int // cold starts of it, each with a warm and a cold host cache (3)
	ConcurrentRuns int // rounds of 15 computers started at once (3)
	UploadRuns     int // uploads through the files API (3)
	UploadMiB      int // size of each upload (200)
	ServeComputers int // cold computers in a `bothy serve` whose memory is read (1000); -1 skips
	// NpmRuns are the runs of the npm install on each side (3); -1 skips
	// it, and NpmSkip says why.
	NpmRuns int
	NpmSkip string
	// LeaseCounts are the numbers of active leases at which a `bothy
	// serve`'s memory is read ({1, 5, 10}).
	LeaseCounts []int

	// Only, if set, runs only the scenarios whose names contain one of
	// its comma-separated words.
	Only string
}

// QuickRuntime is a smoke run's counts.
var QuickRuntime = RuntimeOptions{WarmRuns: 20, CLIRuns: 5, ColdRuns: 3, StreamRuns: 1, StreamLines: 50, FanOutRuns: 2, EditRuns: 3, FileOpsRuns: 1,
	LargeRuns: 1, ConcurrentRuns: 1, UploadRuns: 1, UploadMiB: 50,
	NpmRuns: -1, NpmSkip: "not run by --quick: one install takes about 20 s a side, and the cache fill as long; the full bench runs it"}

func (o *RuntimeOptions) defaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&o.WarmRuns, 200)
	def(&o.CLIRuns, 50)
	def(&o.ColdRuns, 10)
	def(&o.StreamRuns, 3)
	def(&o.StreamLines, 100)
	def(&o.FanOutRuns, 5)
	def(&o.EditRuns, 10)
	def(&o.FileOpsRuns, 5)
	def(&o.LargeRuns, 3)
	def(&o.ConcurrentRuns, 3)
	def(&o.UploadRuns, 3)
	def(&o.UploadMiB, 200)
	def(&o.ServeComputers, 1000)
	def(&o.NpmRuns, 3)
	if len(o.LeaseCounts) == 0 {
		o.LeaseCounts = []int{1, 5, 10}
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Sizes of the runtime scenarios.
const (
	fanOut         = 30       // computers created for one conversation
	concurrent     = 15       // computers started at once
	smallWorkspace = 10 << 20 // the cold-start workspace
	smallFiles     = 100
	streamEvery    = 20 * time.Millisecond
)

// RuntimeReport holds the runtime figures and their baselines from one run.
type RuntimeReport struct {
	Kernel         string   `json:"kernel"`
	Bwrap          string   `json:"bwrap"`
	WorkspaceFiles int      `json:"workspace_files"` // of the cold-start and edit workspace
	WorkspaceBytes int64    `json:"workspace_bytes"`
	EditPath       string   `json:"edit_path"`
	Figures        []Figure `json:"figures"`
	// Supervisor is the program that ran each lease's supervisor:
	// "bothy-supervisor", or "bothy supervisor" (the whole binary).
	Supervisor string `json:"supervisor,omitempty"`
	// StreamEarly counts stream lines printed before the client's stream
	// was open, which are left out of the latency.
	StreamEarly int `json:"stream_early_lines"`
	// ServeComputers is how many cold computers the `bothy serve` whose
	// memory is read held.
	ServeComputers int `json:"serve_computers,omitempty"`
	// Residue is what teardown left of the bench's computers: processes,
	// mounts, cgroups, directories, or residue recorded on a lease.
	Residue []string `json:"residue"`
	// LogWarnings counts the server log's warnings and errors by message.
	LogWarnings map[string]int `json:"log_warnings"`
	// Steps is how long each scenario took, setup included.
	Steps []StepTime `json:"steps"`
	Notes []string   `json:"notes,omitempty"`
	// Skipped lists the scenarios that did not run, and why.
	Skipped []Skip `json:"skipped,omitempty"`
	// Npm describes the dependency set of the npm scenario.
	Npm *NpmSet `json:"npm,omitempty"`
	// LeaseCounts are the numbers of active leases at which `bothy
	// serve`'s memory was read (bothy_serve_rss_leases_N).
	LeaseCounts []int `json:"lease_counts,omitempty"`
}

// Skip is a scenario that did not run, and why.
type Skip struct {
	Scenario string `json:"scenario"`
	Reason   string `json:"reason"`
}

func (r *RuntimeReport) skip(scenario, reason string) {
	r.Skipped = append(r.Skipped, Skip{scenario, reason})
}

// StepTime is how long one scenario of the runtime bench took.
type StepTime struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// Figure returns the named figure.
func (r *RuntimeReport) Figure(name string) Figure {
	for _, f := range r.Figures {
		if f.Name == name {
			return f
		}
	}
	return Figure{}
}

func (r *RuntimeReport) add(p io.Writer, f Figure) {
	r.Figures = append(r.Figures, f)
	if f.P99 != 0 {
		fmt.Fprintf(p, "  = %-36s p50 %8.2f  p99 %8.2f  min %8.2f  max %8.2f %s (%d runs)\n", f.Name, f.Median, f.P99, f.Min, f.Max, f.Unit, len(f.Runs))
	} else {
		fmt.Fprintf(p, "  = %-36s p50 %8.2f  min %8.2f  max %8.2f %s (%d runs)\n", f.Name, f.Median, f.Min, f.Max, f.Unit, len(f.Runs))
	}
}

// RunRuntime starts an embedded server (SQLite, local blobs, the
// in-process agent with the given providers) over a new data directory
// and measures bothy computers through its API, each figure beside a
// baseline run in alternation with it: warm command latency (API and
// CLI), cold starts of a small and a large workspace with a warm and a
// cold host cache, stream latency, fan-out, checkpoint after an edit, 15
// starts at once, an upload, file operations inside a computer, the
// memory of leases and of `bothy serve`, and destroy. It destroys every
// computer it created and reports what teardown left.
func RunRuntime(ctx context.Context, opts RuntimeOptions) (rep *RuntimeReport, err error) {
	opts.defaults()
	p := opts.Progress
	if len(opts.Providers) == 0 || len(opts.SupervisorCommand) == 0 {
		return nil, errors.New("runtime bench: providers and a supervisor command are required")
	}
	if err := exec.Command("bwrap", "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true").Run(); err != nil {
		return nil, fmt.Errorf("plain bwrap does not run here (run as root after scripts/sandbox-deps): %w", err)
	}
	rep = &RuntimeReport{Kernel: uname(), Bwrap: strings.TrimSpace(output("bwrap", "--version"))}
	rep.Supervisor = strings.Join(append([]string{filepath.Base(opts.SupervisorCommand[0])}, opts.SupervisorCommand[1:]...), " ")
	work := filepath.Join(opts.WorkDir, "runtime")
	os.RemoveAll(work)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	fmt.Fprintf(p, "starting an embedded server in %s\n", work)
	e, err := startServer(ctx, filepath.Join(work, "data"), &opts)
	if err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	if e.uncounted != "" {
		rep.skip("concurrent provider operations", e.uncounted)
	}
	defer func() {
		fmt.Fprintf(p, "destroying %d computers and stopping the server\n", len(e.computers))
		residue, cerr := e.Close(context.Background())
		if rep != nil {
			rep.Residue = append([]string{}, residue...)
			rep.LogWarnings = e.logWarnings()
		}
		for _, r := range residue {
			fmt.Fprintf(p, "  residue: %s\n", r)
		}
		if err == nil && cerr != nil {
			err = cerr
		}
	}()

	// The small workspace: about a hundred files, 10 MiB.
	src := filepath.Join(work, "small")
	st, err := Generate(src, TreeSpec{Files: smallFiles, TotalSize: smallWorkspace, Seed: 2})
	if err != nil {
		return nil, err
	}
	rep.WorkspaceFiles, rep.WorkspaceBytes, rep.EditPath = st.Files, st.Bytes, st.Paths[1]

	steps := []step{
		{"warm command latency", warmTrue},
		{"cold start, 10 MiB workspace", coldStart},
		{"stream latency", streamLatency},
		{"30 computers for one conversation", fanOutCreate},
		{"checkpoint after a small edit", editCheckpoint},
		{"15 computers started at once", concurrentStarts},
		{fmt.Sprintf("upload of a %d MiB artifact", opts.UploadMiB), upload},
	}
	if opts.LargeTree != "" {
		steps = append(steps, step{"cold start, large workspace", largeColdStart})
	}
	if opts.FileOpsRuns > 0 {
		steps = append(steps, step{"file operations", fileOps})
	}
	if opts.NpmRuns > 0 {
		steps = append(steps, step{npmScenario, npmInstall})
	} else if selected(npmScenario, opts.Only) {
		rep.skip(npmScenario, opts.NpmSkip)
	}
	steps = append(steps, step{"destroy", destroyActive})
	if opts.CLI != "" {
		steps = append(steps, step{"memory per active lease", leaseMemory})
	} else {
		rep.skip("memory per active lease", "no bothy binary to run as `bothy serve`")
	}
	if opts.ServeComputers > 0 && opts.CLI != "" {
		steps = append(steps, step{fmt.Sprintf("memory of bothy serve with %d cold computers", opts.ServeComputers), serveMemory})
	}
	for _, s := range steps {
		if !selected(s.name, opts.Only) {
			continue
		}
		fmt.Fprintf(p, "%s\n", s.name)
		began := time.Now()
		if err := s.fn(ctx, e, &opts, rep, src); err != nil {
			return rep, fmt.Errorf("%s: %w", s.name, err)
		}
		rep.Steps = append(rep.Steps, StepTime{s.name, time.Since(began).Seconds()})
		fmt.Fprintf(p, "  (%s took %.1f s)\n", s.name, time.Since(began).Seconds())
	}
	return rep, nil
}

// step is one scenario of RunRuntime; src is the small workspace's tree.
type step struct {
	name string
	fn   func(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, src string) error
}

func selected(name, only string) bool {
	if only == "" {
		return true
	}
	for _, w := range strings.Split(only, ",") {
		if w != "" && strings.Contains(name, w) {
			return true
		}
	}
	return false
}

func uname() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return runtime.GOOS
	}
	b := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return "Linux " + string(b)
}

func output(name string, args ...string) string {
	b, _ := exec.Command(name, args...).Output()
	return string(b)
}
