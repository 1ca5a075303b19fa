package bench

import (
	"fmt"
	"strings"
)

// alsoMarkdown writes, under the goals, the summary's other figures: npm
// and file operations beside tmpfs and the peer, admission throughput,
// 15 starts at once, and the memory of a lease.
func (r *Report) alsoMarkdown(b *strings.Builder) {
	var items []string
	if rt := r.Runtime; rt != nil {
		f := rt.Figure
		if bo := f("bothy_npm_ci"); len(bo.Runs) > 0 && rt.Npm != nil {
			h, t := f("host_npm_ci"), f("tmpfs_npm_ci")
			s := fmt.Sprintf("**npm install** (`npm ci --offline` of %d packages, %s files, %.0f MiB, from a local cache): %.1f s in a computer, %.1f s on the host's ext4",
				rt.Npm.Packages, thousands(rt.Npm.Files), mib(rt.Npm.Bytes), bo.Median, h.Median)
			if len(t.Runs) > 0 {
				s += fmt.Sprintf(", %.1f s on tmpfs", t.Median)
			}
			s += fmt.Sprintf(": the computer takes %.2fx the host's ext4 by medians, %.2fx by the fastest run of each (host ext4 runs: %s)", ratio(bo.Median, h.Median), ratio(bo.Min, h.Min), spreadRuns(h))
			if len(t.Runs) > 0 {
				s += fmt.Sprintf(", and %.2fx tmpfs", ratio(bo.Median, t.Median))
			}
			items = append(items, s+fmt.Sprintf(". The peer's, for %s files on 1 vCPU: %.1f s in its workspace, %.1f s on ext4, %.1f s on tmpfs (%.2fx ext4).",
				thousands(peerNpmFiles), peerNpmSeconds, peerNpmExt4, peerNpmTmpfs, peerNpmSeconds/peerNpmExt4))
		}
		if bo, h, t := f("bothy_fileops_total"), f("host_fileops_total"), f("tmpfs_fileops_total"); len(bo.Runs) > 0 && len(t.Runs) > 0 {
			items = append(items, fmt.Sprintf("**File operations**, the whole script: %s in a computer, %s on the host's ext4, %s on tmpfs; each step on all three is under [File operations](#file-operations-inside-a-computer).",
				value(bo.Median, "ms"), value(h.Median, "ms"), value(t.Median, "ms")))
		}
		if st := f("bothy_start_15_at_once"); len(st.Runs) > 0 {
			s := fmt.Sprintf("**15 computers started at once**: all 15 commands answered in %s (15 plain `bwrap … true` at once: %s)", value(st.Median, "ms"), value(f("baseline_bwrap_true_x15_at_once").Median, "ms"))
			if pk := f("bothy_start_15_peak_provider_starts"); len(pk.Runs) > 0 {
				s += fmt.Sprintf("; at most **%.0f** provider starts ran at once (max over %d rounds, counted by a hook around the provider's `Start` in the agent), each taking %s against %s for one start alone",
					pk.Max, len(pk.Runs), value(f("bothy_start_15_provider_start").Median, "ms"), value(f("bothy_cold_start_provider_start").Median, "ms"))
			}
			items = append(items, s+".")
		}
		if sup := f("bothy_lease_supervisor_rss"); len(sup.Runs) > 0 {
			s := fmt.Sprintf("**Memory per active lease**: its supervisor process %s resident (%s proportional), its sandbox (bwrap and its init) %s resident",
				value(sup.Median, "MiB"), value(f("bothy_lease_supervisor_pss").Median, "MiB"), value(f("bothy_lease_sandbox_rss").Median, "MiB"))
			if per := f("bothy_serve_rss_per_lease"); len(per.Runs) > 0 {
				var at []string
				for _, k := range append([]int{0}, rt.LeaseCounts...) {
					at = append(at, fmt.Sprintf("%d: %s", k, value(f(fmt.Sprintf("bothy_serve_rss_leases_%d", k)).Median, "MiB")))
				}
				s += fmt.Sprintf("; `bothy serve` (control plane and agent) grows by %s per active lease (resident, by active leases: %s)", value(per.Median, "MiB"), strings.Join(at, ", "))
			}
			items = append(items, s+".")
		}
	}
	if sk := r.skipped(); len(sk) > 0 {
		var s []string
		for _, x := range sk {
			s = append(s, x.Scenario)
		}
		items = append(items, "**Skipped this run**: "+strings.Join(s, "; ")+" ([why](#skipped)).")
	}
	if len(items) > 0 {
		fmt.Fprintf(b, "\n")
	}
	for _, it := range items {
		fmt.Fprintf(b, "- %s\n", it)
	}
	if a := r.Admission; a != nil && len(a.Figures) > 0 {
		fmt.Fprintf(b, "\n**Admission and reservation throughput**, operations per second (%s; [method](#admission-and-reservation-throughput)):\n\n%s", a.workers(), a.table(false))
	}
}

// skipped lists the scenarios of every part that did not run.
func (r *Report) skipped() []Skip {
	var out []Skip
	if r.Runtime != nil {
		out = append(out, r.Runtime.Skipped...)
	}
	if r.Admission != nil {
		out = append(out, r.Admission.Skipped...)
	}
	return out
}

// skippedMarkdown says which scenarios did not run, and why.
func (r *Report) skippedMarkdown(b *strings.Builder) {
	sk := r.skipped()
	if len(sk) == 0 {
		return
	}
	fmt.Fprintf(b, "## Skipped\n\n")
	for _, x := range sk {
		fmt.Fprintf(b, "- **%s**: %s\n", x.Scenario, strings.TrimSuffix(x.Reason, ".")+".")
	}
	fmt.Fprintf(b, "\n")
}

// workers describes the callers of the figures: "1 caller / 8 callers".
func (r *AdmissionReport) workers() string {
	var s []string
	for _, w := range r.Workers {
		if w == 1 {
			s = append(s, "1 caller")
		} else {
			s = append(s, fmt.Sprintf("%d concurrent callers", w))
		}
	}
	rounds := "1 round"
	if r.Rounds != 1 {
		rounds = fmt.Sprintf("median of %d rounds", r.Rounds)
	}
	return fmt.Sprintf("%s of %d, %s", rounds, r.Ops, strings.Join(s, " / "))
}

// table renders the admission figures, a row per scenario and a column
// per store; full adds each figure's min and max.
func (r *AdmissionReport) table(full bool) string {
	var b strings.Builder
	pg := "PostgreSQL"
	if r.PostgresVersion != "" {
		pg += " " + strings.Fields(r.PostgresVersion)[0]
	}
	fmt.Fprintf(&b, "| operation | SQLite | %s |\n|---|---|---|\n", pg)
	for _, k := range admissionKinds {
		label := k.Label
		if strings.Contains(label, "%s") {
			label = fmt.Sprintf(label, thousands(r.Busy))
		}
		fmt.Fprintf(&b, "| %s |", label)
		for _, store := range []string{"sqlite", "postgres"} {
			var cells []string
			for _, w := range r.Workers {
				f := r.Figure(fmt.Sprintf("admission_%s_%s_w%d", store, k.Key, w))
				switch {
				case len(f.Runs) == 0:
					cells = append(cells, "skipped")
				case full:
					cells = append(cells, fmt.Sprintf("%.0f (%.0f–%.0f)", f.Median, f.Min, f.Max))
				default:
					cells = append(cells, fmt.Sprintf("%.0f", f.Median))
				}
			}
			fmt.Fprintf(&b, " %s |", strings.Join(cells, " / "))
		}
		fmt.Fprintf(&b, "\n")
	}
	return b.String()
}

// markdown writes the admission section.
func (r *AdmissionReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "## Admission and reservation throughput\n\n")
	fmt.Fprintf(b, "The control plane (`control.Controller`, as the API calls it) over each store, in the bench's process, with no agent: nothing is dispatched or started, so this is what admission itself costs. Each round runs %d operations, each on a computer of its own, created untimed before the round. On a computer with a lease: one computer per caller, new each round, its lease reserved by a first command, untimed, so each takes %d commands in a round with one caller. On a computer with %s earlier commands: one computer, given them untimed before the first round, then %d commands a round, so it holds %s by the last. Figures are operations per second, %s; in brackets, the slowest and fastest round.\n\n",
		r.Ops, r.Ops, thousands(r.Busy), busyOps, thousands(r.Busy+busyOps*r.Rounds*len(r.Workers)), r.workers())
	fmt.Fprintf(b, "%s\n", r.table(true))
	if x, y := r.Figure("admission_sqlite_leased_w1"), r.Figure("admission_sqlite_busy_w1"); len(x.Runs) > 0 && len(y.Runs) > 0 && y.Median < x.Median/2 {
		fmt.Fprintf(b, "**Admission slows down as a computer's commands accumulate**: on SQLite, one caller admits %.0f commands a second on a computer with a lease and few commands, and %.0f on one with %s or more. Every read of a computer (`FindComputer`, which `RunCommand` calls three times, once inside the command's insert) sums the usage of all of the computer's commands (six correlated subqueries over `commands` in `sqldb/computer.go`), so each admission costs time in proportion to the commands the computer ever ran. Keeping the totals on the computer row (updated when a command's usage is recorded), or reading them only where usage is shown, would make admission independent of a computer's history.\n\n",
			x.Median, y.Median, thousands(r.Busy))
	}
	fmt.Fprintf(b, "A cold computer's `RunCommand` is two write transactions (the command, then the lease) and three reads; on a computer with a lease, one write and three reads; `AcquireLease` is one write transaction. SQLite is a new file in WAL mode with `synchronous=NORMAL`, as `bothy serve` opens it: a commit does not wait for the disk, and writers take turns. ")
	if r.PostgresVersion != "" {
		fmt.Fprintf(b, "PostgreSQL (%s, on this host) gets a new database with the server's settings, as a production server's would have: `synchronous_commit=%s`", r.PostgresVersion, r.PostgresSyncCommit)
		if r.PostgresSyncCommit == "on" {
			fmt.Fprintf(b, ", so every commit waits for its WAL to reach the disk; concurrent callers share those flushes")
		}
		fmt.Fprintf(b, ".\n\n")
	} else {
		fmt.Fprintf(b, "PostgreSQL was not measured this run (see [Skipped](#skipped)).\n\n")
	}
}

// thousands renders n with a comma every three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
