package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Goals from the issues "Durable workspace store", "Computers that run"
// and "Performance report".
const (
	goalFullRatio    = 1.3  // full checkpoint / tar | zstd --fast
	goalIncrSeconds  = 0.25 // incremental checkpoint after 25 edits
	goalRestoreRatio = 1.2  // cold restore / zstd -d | tar -x
	goalWarmRatio    = 2.0  // warm `true` through the API / plain bwrap true
	goalColdMS       = 150  // cold start of a 10 MiB workspace, p50
	goalStreamMS     = 5    // printed line to SSE client, p50
	goalFanOutMS     = 200  // 30 computers created
	goalFileOpsRatio = 1.15 // each file operation in a computer / host ext4
	goalServeRSSMiB  = 150  // bothy serve with 1,000 cold computers
	goalNpmRatio     = 1.15 // npm install in a computer / host ext4
)

// Report is one run of `bothy bench`: the workspace store's figures (at
// the top level, where they have always been), the runtime's, and the
// goals they are held to.
type Report struct {
	*StorageReport
	Date        time.Time `json:"date"`
	GoVersion   string    `json:"go_version"`
	CPUs        int       `json:"cpus"`
	Command     string    `json:"command"`
	Quick       bool      `json:"quick"`
	WallSeconds float64   `json:"wall_seconds"`
	// LoadStart and LoadEnd are the host's load averages (1, 5 and 15
	// minutes) when the run began and ended: other work on a shared host
	// moves the figures.
	LoadStart string           `json:"load_start,omitempty"`
	LoadEnd   string           `json:"load_end,omitempty"`
	Runtime   *RuntimeReport   `json:"runtime,omitempty"`
	Admission *AdmissionReport `json:"admission,omitempty"`
	Goals     []Goal           `json:"goals"`
	// Charts are the PNG files WriteCharts wrote beside the report.
	Charts []string `json:"charts,omitempty"`
}

// Goal is one line of the summary: a bothy figure, its baseline from the
// same run, and the goal it is held to.
type Goal struct {
	Scenario      string  `json:"scenario"`
	Figure        string  `json:"figure"`
	Unit          string  `json:"unit"`
	Value         float64 `json:"value"` // the median
	P99           float64 `json:"p99,omitempty"`
	Baseline      string  `json:"baseline,omitempty"`
	BaselineLabel string  `json:"baseline_label,omitempty"`
	BaselineValue float64 `json:"baseline_value,omitempty"`
	Ratio         float64 `json:"ratio,omitempty"`
	Goal          string  `json:"goal"`
	Met           bool    `json:"met"`
	// Skipped says why the goal's scenario did not run ("" if it did).
	Skipped string `json:"skipped,omitempty"`
}

// Finish stamps the report and works out its goals.
func (r *Report) Finish(wall time.Duration) {
	r.Date, r.GoVersion, r.CPUs, r.WallSeconds = time.Now().UTC(), runtime.Version(), runtime.NumCPU(), wall.Seconds()
	r.LoadEnd = LoadAverage()
	r.ComputeGoals()
}

// ComputeGoals works out the report's goals from its figures, as Finish
// does; `bothy bench --from` calls it to write an earlier run's report
// again with the goals as the bench now states them.
func (r *Report) ComputeGoals() {
	r.Goals = nil
	if rt := r.Runtime; rt != nil {
		fig := rt.Figure
		ratioGoal := func(scenario, name, base, label string, goal float64) {
			f, b := fig(name), fig(base)
			if len(f.Runs) == 0 || len(b.Runs) == 0 {
				return
			}
			x := ratio(f.Median, b.Median)
			r.Goals = append(r.Goals, Goal{Scenario: scenario, Figure: name, Unit: f.Unit, Value: f.Median, P99: f.P99,
				Baseline: base, BaselineLabel: label, BaselineValue: b.Median, Ratio: x,
				Goal: "≤ " + strconv.FormatFloat(goal, 'f', -1, 64) + "x", Met: x <= goal})
		}
		absGoal := func(scenario, name, base, label string, goal float64) {
			f, b := fig(name), fig(base)
			if len(f.Runs) == 0 {
				return
			}
			g := Goal{Scenario: scenario, Figure: name, Unit: f.Unit, Value: f.Median, P99: f.P99,
				Goal: fmt.Sprintf("< %g %s", goal, f.Unit), Met: f.Median < goal}
			if len(b.Runs) > 0 {
				g.Baseline, g.BaselineLabel, g.BaselineValue, g.Ratio = base, label, b.Median, ratio(f.Median, b.Median)
			}
			r.Goals = append(r.Goals, g)
		}
		ratioGoal("warm `true` through the API", "bothy_api_true", "baseline_bwrap_true", "plain `bwrap … true`", goalWarmRatio)
		absGoal("cold start, 10 MiB workspace (warm host cache)", "bothy_cold_start_warm_cache", "baseline_bwrap_true", "plain `bwrap … true`", goalColdMS)
		absGoal("cold start, 10 MiB workspace (cold host cache)", "bothy_cold_start_cold_cache", "baseline_bwrap_true", "plain `bwrap … true`", goalColdMS)
		absGoal("stream latency, printed line to SSE client", "bothy_stream_latency", "baseline_pipe_stream_latency", "the same script's stdout through a pipe", goalStreamMS)
		absGoal("30 computers created for one conversation", "bothy_create_30_computers", "baseline_healthz_x30", "30 x `GET /healthz`", goalFanOutMS)
		absGoal(fmt.Sprintf("`bothy serve` resident memory, %d cold computers", rt.ServeComputers), "bothy_serve_rss_cold_computers", "baseline_serve_rss_idle", "idle, no computer", goalServeRSSMiB)
		for _, op := range FileOps {
			if op.Diagnostic {
				continue
			}
			ratioGoal("file operations: "+op.Label, "bothy_"+op.Key, "host_"+op.Key, "bash on the host's ext4", goalFileOpsRatio)
		}
		npm := npmScenario + " of a fixed dependency set, offline from a local cache"
		if rt.Npm != nil {
			npm = fmt.Sprintf("%s (%d packages, %s files), offline from a local cache", npmScenario, rt.Npm.Packages, thousands(rt.Npm.Files))
		}
		if len(fig("bothy_npm_ci").Runs) > 0 {
			ratioGoal(npm, "bothy_npm_ci", "host_npm_ci", "`npm ci` on the host's ext4", goalNpmRatio)
		} else {
			for _, sk := range rt.Skipped {
				if sk.Scenario == npmScenario {
					r.Goals = append(r.Goals, Goal{Scenario: npm, Figure: "bothy_npm_ci", Unit: "s",
						Goal: "≤ " + strconv.FormatFloat(goalNpmRatio, 'f', -1, 64) + "x", Skipped: sk.Reason})
				}
			}
		}
	}
	if s := r.StorageReport; s != nil {
		full, tarz := s.Figure("bothy_full_checkpoint"), s.Figure("baseline_tar_zstd")
		incr := s.Figure("bothy_incremental_checkpoint")
		rest, untar := s.Figure("bothy_cold_restore"), s.Figure("baseline_untar")
		tree := fmt.Sprintf("%d files, %.0f MiB", s.TreeFiles, mib(s.TreeBytes))
		x := ratio(full.Median, tarz.Median)
		r.Goals = append(r.Goals, Goal{Scenario: "full checkpoint, " + tree, Figure: full.Name, Unit: "s", Value: full.Median,
			Baseline: tarz.Name, BaselineLabel: "`tar | zstd --fast`", BaselineValue: tarz.Median, Ratio: x, Goal: fmt.Sprintf("≤ %.1fx", goalFullRatio), Met: x <= goalFullRatio})
		r.Goals = append(r.Goals, Goal{Scenario: fmt.Sprintf("incremental checkpoint, %d files changed", s.Edits), Figure: incr.Name, Unit: "s", Value: incr.Median,
			Goal: fmt.Sprintf("≤ %.2f s", goalIncrSeconds), Met: incr.Median <= goalIncrSeconds})
		x = ratio(rest.Median, untar.Median)
		r.Goals = append(r.Goals, Goal{Scenario: "cold restore, " + tree, Figure: rest.Name, Unit: "s", Value: rest.Median,
			Baseline: untar.Name, BaselineLabel: "`zstd -d | tar -x`", BaselineValue: untar.Median, Ratio: x, Goal: fmt.Sprintf("≤ %.1fx", goalRestoreRatio), Met: x <= goalRestoreRatio})
	}
}

// LoadAverage returns the host's load averages over 1, 5 and 15 minutes,
// as /proc/loadavg has them ("" if it cannot be read).
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteMarkdown writes docs/performance.md: the summary of the goals first,
// then each part's figures, then every figure.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Performance\n\n")
	fmt.Fprintf(&b, "Figures from `%s`, run on %s (%s, %d CPUs", r.Command, r.Date.Format("2006-01-02"), r.GoVersion, r.CPUs)
	if r.Runtime != nil {
		fmt.Fprintf(&b, ", %s, %s", r.Runtime.Kernel, r.Runtime.Bwrap)
	}
	fmt.Fprintf(&b, "), which took %s. Each figure is the median of several runs, with min and max (and the 99th percentile for latencies), beside its baseline measured in the same run, alternating with it, on the same disk.\n\n", time.Duration(r.WallSeconds*float64(time.Second)).Round(time.Second))
	fmt.Fprintf(&b, "## Summary\n\n| scenario | bothy | baseline | ratio | goal | met |\n|---|---|---|---|---|---|\n")
	for _, g := range r.Goals {
		if g.Skipped != "" {
			fmt.Fprintf(&b, "| %s | not measured | — | — | %s | skipped: %s |\n", g.Scenario, g.Goal, g.Skipped)
			continue
		}
		base, x := "—", "—"
		if g.Baseline != "" {
			base = fmt.Sprintf("%s (%s)", value(g.BaselineValue, g.Unit), g.BaselineLabel)
			x = fmt.Sprintf("%.2fx", g.Ratio)
		}
		v := value(g.Value, g.Unit)
		if g.P99 != 0 {
			v += fmt.Sprintf(", p99 %s", value(g.P99, g.Unit))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", g.Scenario, v, base, x, g.Goal, yes(g.Met))
	}
	var missed []string
	for _, g := range r.Goals {
		if !g.Met && g.Skipped == "" {
			missed = append(missed, g.Scenario)
		}
	}
	if len(missed) > 0 {
		fmt.Fprintf(&b, "\nMissed: %s. [Where the goals are missed](#where-the-goals-are-missed) says why, as far as the figures show.\n", strings.Join(missed, "; "))
	} else if len(r.Goals) > 0 {
		fmt.Fprintf(&b, "\nEvery goal measured is met.\n")
	}
	r.alsoMarkdown(&b)
	for _, c := range r.Charts {
		fmt.Fprintf(&b, "\n![%s](%s)\n", strings.TrimSuffix(c, ".png"), c)
	}
	fmt.Fprintf(&b, "\n## How to reproduce\n\nAs root, on a host that runs bubblewrap (Debian 12 here):\n\n```\nscripts/sandbox-deps\ngo run ./cmd/bothy bench           # the full report, under 20 minutes\ngo run ./cmd/bothy bench --quick   # a smoke run, under 3 minutes (CI)\nscripts/build && bin/bothy bench   # each lease supervised by bothy-supervisor, as deployed\n```\n\n")
	fmt.Fprintf(&b, "It must run as `bothy bench` (not a test binary), because each lease's supervisor is the bothy binary's: `bothy-supervisor` beside it (as `scripts/quickstart` builds them), else the binary's own `supervisor` verb, which holds more memory (the supervisor figures below say which one ran). It generates its trees in a scratch directory (`--work`, default under the system temp dir), starts its own embedded server there (SQLite, a local blob directory, the in-process agent and the `bwrap` provider, as `bothy serve` runs them), prints progress, destroys every computer it created, checks that no process, mount, cgroup or lease directory is left, and rewrites this file, `docs/performance.json` and the charts. `--storage=false`, `--runtime=false`, `--fileops=false`, `--npm=false` and `--admission=false` leave parts out; `--from docs/performance.json` writes this file and the charts again from the figures of an earlier run, measuring nothing.\n\n")
	fmt.Fprintf(&b, "The npm scenario fills a local npm cache first, with one online `npm ci` of the lockfile in `bench/testdata/npm/` through npm's configured registry, untimed; without a registry it is skipped, and says so. The admission scenario runs on PostgreSQL when `$%s` names a server whose role may create a database (as root, `eval \"$(scripts/pg-test-env)\"` starts the local one and sets it; `--postgres URL` does the same); otherwise that half is skipped, and says so.\n\n", EnvPostgresURL)
	r.durationMarkdown(&b)
	if r.Runtime != nil {
		r.Runtime.markdown(&b, r)
	}
	if r.Admission != nil {
		r.Admission.markdown(&b)
	}
	if r.StorageReport != nil {
		r.StorageReport.markdown(&b)
	}
	r.missesMarkdown(&b)
	fmt.Fprintf(&b, "## All figures\n\n| figure | median | p99 | min | max | runs |\n|---|---|---|---|---|---|\n")
	var all []Figure
	if r.Runtime != nil {
		all = append(all, r.Runtime.Figures...)
	}
	if r.Admission != nil {
		all = append(all, r.Admission.Figures...)
	}
	if r.StorageReport != nil {
		all = append(all, r.StorageReport.Figures...)
	}
	for _, f := range all {
		p99 := "—"
		if f.P99 != 0 {
			p99 = fmt.Sprintf("%.3f", f.P99)
		}
		fmt.Fprintf(&b, "| %s | %.3f %s | %s | %.3f | %.3f | %d |\n", f.Name, f.Median, f.Unit, p99, f.Min, f.Max, len(f.Runs))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// durationMarkdown says how long the run took, and what of it was spent
// waiting on the stop stall (see problemsMarkdown).
func (r *Report) durationMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "This run took %s", time.Duration(r.WallSeconds*float64(time.Second)).Round(time.Second))
	if r.Runtime != nil {
		st := r.Runtime.Figure("bothy_stop_15_at_once")
		stalled := 0
		for _, v := range st.Runs {
			if v > 30000 {
				stalled++
			}
		}
		if stalled > 0 {
			fmt.Fprintf(b, ", of which about %d min went to %d of the %d rounds of 15 stops, each waiting a minute on the stall described under [Problems](#problems-this-run-showed)", stalled, stalled, len(st.Runs))
		}
	}
	fmt.Fprintf(b, ".")
	if r.LoadStart != "" && r.LoadEnd != "" {
		fmt.Fprintf(b, " The host's load averages (1, 5 and 15 minutes) were %s when it began and %s when it ended, on %d CPUs: the host is shared, and other work on it moves the figures.", r.LoadStart, r.LoadEnd, r.CPUs)
	}
	fmt.Fprintf(b, "\n\n")
}

// markdown writes the storage section.
func (r *StorageReport) markdown(b *strings.Builder) {
	full, tarz := r.Figure("bothy_full_checkpoint"), r.Figure("baseline_tar_zstd")
	incr := r.Figure("bothy_incremental_checkpoint")
	rest, untar := r.Figure("bothy_cold_restore"), r.Figure("baseline_untar")
	fmt.Fprintf(b, "## The workspace store\n\n")
	fmt.Fprintf(b, "Tree: %d files, %.1f MiB (most files under 4 KiB, a tenth random bytes, the rest text), plus empty directories and symlinks. Embedded default: SQLite and a local blob directory. %d runs per figure, with a warm page cache for every contender (`--quick`: a %d-file tree).\n\n", r.TreeFiles, mib(r.TreeBytes), len(full.Runs), QuickTree.Files)
	fmt.Fprintf(b, "| scenario | bothy | baseline | ratio | goal | met |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(b, "| full checkpoint | %s | %s (`tar \\| zstd --fast`) | %.2fx | ≤ %.1fx | %s |\n", secs(full), secs(tarz), ratio(full.Median, tarz.Median), goalFullRatio, yes(ratio(full.Median, tarz.Median) <= goalFullRatio))
	fmt.Fprintf(b, "| incremental checkpoint, %d files changed | %s | — | — | ≤ %.2f s | %s |\n", r.Edits, secs(incr), goalIncrSeconds, yes(incr.Median <= goalIncrSeconds))
	fmt.Fprintf(b, "| cold restore | %s | %s (`zstd -d \\| tar -x`) | %.2fx | ≤ %.1fx | %s |\n\n", secs(rest), secs(untar), ratio(rest.Median, untar.Median), goalRestoreRatio, yes(ratio(rest.Median, untar.Median) <= goalRestoreRatio))
	fmt.Fprintf(b, "Stored size after a full checkpoint: %.1f MiB of packs, against %.1f MiB for the `.tar.zst`.\n", mib(r.StoredSize), mib(r.TarZstSize))
	fmt.Fprintf(b, "The last incremental checkpoint read %d files (%d bytes), wrote %d new chunks (%d bytes), %d new tree objects and %d pack(s) of %d bytes.\n\n",
		r.Incr.FilesRead, r.Incr.BytesRead, r.Incr.NewBlobs, r.Incr.NewBlobBytes, r.Incr.NewTrees, r.Incr.PacksWritten, r.Incr.PackBytes)
}

// value renders a figure's value in its unit.
func value(v float64, unit string) string {
	switch {
	case unit == "s":
		return fmt.Sprintf("%.3f s", v)
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, unit)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}

// spread renders a figure as "median (min–max)", with p99 if it has one.
func spread(f Figure) string {
	if len(f.Runs) == 0 {
		return "—"
	}
	s := fmt.Sprintf("%s (%s–%s", value(f.Median, f.Unit), trim(f.Min), trim(f.Max))
	if f.P99 != 0 {
		s += ", p99 " + trim(f.P99)
	}
	return s + ")"
}

func trim(v float64) string { return strings.TrimSuffix(strings.Fields(value(v, ""))[0], " ") }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func secs(f Figure) string { return fmt.Sprintf("%.3f s (%.3f–%.3f)", f.Median, f.Min, f.Max) }

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
