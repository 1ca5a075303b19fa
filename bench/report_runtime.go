package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// phaseText says what each phase of a command through the API holds.
var phaseText = map[string]string{
	"admit":    "request sent → command journaled (`created_at`): HTTP, validation, the SQLite insert",
	"dispatch": "→ taken by the agent's long poll (`dispatched_at`); for a cold computer, the lease start is here",
	"start":    "→ journaled by the lease's supervisor and started (`started_at`)",
	"run":      "the process itself through the provider's exec chain (`duration_ms`, whole ms)",
	"finish":   "→ end recorded (`finished_at`): output events, the checkpoint of the writable layer, the report",
	"answer":   "→ the client has decoded the answer",
}

// markdown writes the runtime sections.
func (r *RuntimeReport) markdown(b *strings.Builder, rep *Report) {
	f := r.Figure
	fmt.Fprintf(b, "## Computers\n\n")
	fmt.Fprintf(b, "An embedded server in the bench's process (SQLite, a local blob directory, the in-process agent speaking the runtime protocol over loopback, one supervisor process per lease, the `bwrap` provider over overlayfs), called through the Go client (`http.Client`) over loopback HTTP with one keep-alive connection. This host is shared and has 2 CPUs, so single runs can be slow; medians and alternation with the baselines absorb most of it.\n\n")

	fmt.Fprintf(b, "### Warm command latency\n\nA computer with a warm lease (it ran a command before), then `true` again and again, each run alternating with the baselines.\n\n")
	fmt.Fprintf(b, "| how | p50 | p99 | min | max | runs |\n|---|---|---|---|---|---|\n")
	for _, row := range [][2]string{
		{"baseline_exec_true", "fork/exec of `/bin/true` (os/exec)"},
		{"baseline_bwrap_true", "plain `bwrap --ro-bind / / --unshare-all --die-with-parent true`"},
		{"bothy_api_true", "bothy API: `RunCommand{Argv: [\"true\"], Wait: true}`"},
		{"bothy_cli_true", "bothy CLI: `bothy run ID -- true` as a new process"},
	} {
		latencyRow(b, f(row[0]), row[1])
	}
	fmt.Fprintf(b, "\nWhere the time goes, by the command's own timestamps (medians, ms; one host, one clock):\n\n")
	fmt.Fprintf(b, "| phase | what | warm `true` | cold start, warm host cache | cold start, cold host cache |\n|---|---|---|---|---|\n")
	for _, ph := range phaseNames {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", ph, phaseText[ph], median(f("bothy_api_true_"+ph)),
			median(f("bothy_cold_start_warm_cache_"+ph)), median(f("bothy_cold_start_cold_cache_"+ph)))
	}

	fmt.Fprintf(b, "\n### Cold start\n\nA stopped computer (cold: no lease), then `RunCommand{true, Wait: true}`, timed from the request to its answer, then a stop (timed apart). \"Warm host cache\": the base revision is still materialized on this host, the realistic case for a computer that ran here before; \"cold host cache\": the cache was evicted (`hostcache.Evict`) first, so the revision is restored from the blob store.\n\n")
	fmt.Fprintf(b, "| workspace | warm host cache | cold host cache | stop |\n|---|---|---|---|\n")
	fmt.Fprintf(b, "| %d files, %.0f MiB | %s | %s | %s |\n", r.WorkspaceFiles, mib(r.WorkspaceBytes),
		spread(f("bothy_cold_start_warm_cache")), spread(f("bothy_cold_start_cold_cache")), spread(f("bothy_cold_start_stop")))
	if x := f("bothy_large_cold_start_warm_cache"); len(x.Runs) > 0 && rep.StorageReport != nil {
		fmt.Fprintf(b, "| %d files, %.0f MiB (the storage tree) | %s | %s | %s |\n", rep.TreeFiles, mib(rep.TreeBytes),
			spread(x), spread(f("bothy_large_cold_start_cold_cache")), spread(f("bothy_large_cold_start_stop")))
	}
	if x := f("bothy_start_15_at_once"); len(x.Runs) > 0 {
		fmt.Fprintf(b, "\n15 cold computers (empty workspaces) started at once, one `true` each, until every answer is in: %s, against %s for 15 plain `bwrap … true` at once. Stopping the 15 at once: %s.\n",
			spread(x), spread(f("baseline_bwrap_true_x15_at_once")), spread(f("bothy_stop_15_at_once")))
		if pk := f("bothy_start_15_peak_provider_starts"); len(pk.Runs) > 0 {
			fmt.Fprintf(b, "\nConcurrent provider operations, counted exactly, not sampled: the bench's agent calls the provider through a wrapper that counts the calls of `Start` and `Stop` in flight and keeps the peak of each round (`bench/opcount.go`). While the 15 started, at most %.0f provider starts ran at once (per round: %s), and each `Start` took %s, against %s for one start alone (the cold starts above). While the 15 stopped, at most %.0f provider stops ran at once (per round: %s), each taking %s.\n",
				pk.Max, counts(pk), spread(f("bothy_start_15_provider_start")), spread(f("bothy_cold_start_provider_start")),
				f("bothy_stop_15_peak_provider_stops").Max, counts(f("bothy_stop_15_peak_provider_stops")), spread(f("bothy_stop_15_provider_stop")))
		}
	}

	fmt.Fprintf(b, "\n### Stream latency\n\nA command prints bash's `$EPOCHREALTIME` every 20 ms (a builtin: no fork between the clock and the write); the client reads the command's server-sent events and subtracts the printed time from the time it decoded the line. The baseline runs the same script with bash on the host and reads its stdout through a pipe.\n\n")
	fmt.Fprintf(b, "| how | p50 | p99 | min | max | lines |\n|---|---|---|---|---|---|\n")
	latencyRow(b, f("baseline_pipe_stream_latency"), "bash on the host, stdout through a pipe")
	latencyRow(b, f("bothy_stream_latency"), "bothy: supervisor journal → agent → control plane → SSE → Go client")
	if r.StreamEarly > 0 {
		fmt.Fprintf(b, "\n%d lines printed before the client's stream was open are left out.\n", r.StreamEarly)
	}

	fmt.Fprintf(b, "\n### Control plane\n\n")
	fmt.Fprintf(b, "- 30 computers created for one conversation, one `POST /v1/computers` after another: %s, against %s for 30 `GET /healthz` on the same connection. All 30 are checked cold, with no lease.\n",
		spread(f("bothy_create_30_computers")), spread(f("baseline_healthz_x30")))
	if x := f("bothy_serve_rss_cold_computers"); len(x.Runs) > 0 {
		fmt.Fprintf(b, "- `bothy serve` as its own process: %s resident idle, %s with %d cold computers (created through its API in %s, then listed).\n",
			value(f("baseline_serve_rss_idle").Median, "MiB"), value(x.Median, "MiB"), r.ServeComputers, value(f("bothy_serve_create_computers").Median, "ms"))
	}

	fmt.Fprintf(b, "\n### Checkpoint, upload, memory and teardown\n\n")
	same, edit := f("bothy_command_no_edit"), f("bothy_command_edit")
	sameF, editF := f("bothy_command_no_edit_finish"), f("bothy_command_edit_finish")
	fmt.Fprintf(b, "- Checkpoint after a small edit (%d files, %.0f MiB workspace, warm lease). Every command ends with a checkpoint of the writable layer and its answer waits for the commit, so a command that appends a line to one file is timed against one that changes nothing, both `bash -c` through the API: %s against %s; by the finish phase alone (the process's end to the recorded end, which holds the checkpoint and commit) %s against %s, so the checkpoint and commit of one small edit cost about **%s**.\n",
		r.WorkspaceFiles, mib(r.WorkspaceBytes), spread(edit), spread(same), spread(editF), spread(sameF), value(editF.Median-sameF.Median, "ms"))
	if x := f("bothy_upload_artifact"); len(x.Runs) > 0 {
		fmt.Fprintf(b, "- Upload of an artifact of random bytes through the files API (`PUT /v1/computers/{id}/files/…` to a cold computer, which commits a revision): %s, against %s for `cp` of the same file on the host's disk (%s).\n",
			spread(x), spread(f("baseline_cp_artifact")), f("baseline_cp_artifact").Command)
	}
	if x := f("bothy_lease_supervisor_rss"); len(x.Runs) > 0 {
		fmt.Fprintf(b, "- Memory per active lease, in a `bothy serve` of its own (control plane and agent in its process, a supervisor process per lease, found by its command line, which names the lease), with one lease started and stopped first so that what the first lease pays once is not counted per lease. Over %d leases: supervisor%s %s resident (%s proportional: shared pages divided among the processes that map them), sandbox (bwrap and its init) %s resident (%s proportional).\n",
			len(x.Runs), supervisorName(r.Supervisor), spread(x), spread(f("bothy_lease_supervisor_pss")), spread(f("bothy_lease_sandbox_rss")), spread(f("bothy_lease_sandbox_pss")))
		if per := f("bothy_serve_rss_per_lease"); len(per.Runs) > 0 {
			var at []string
			for _, k := range append([]int{0}, r.LeaseCounts...) {
				at = append(at, fmt.Sprintf("%s with %d", value(f(fmt.Sprintf("bothy_serve_rss_leases_%d", k)).Median, "MiB"), k))
			}
			fmt.Fprintf(b, "- The `bothy serve` process's resident set size (median of five readings, a second after the last start) by active leases: %s; that is %s per active lease (%s). The Go heap's growth and collection move a reading by a few MiB, so the per-lease figure is rough.\n",
				strings.Join(at, ", "), value(per.Median, "MiB"), per.Command)
		}
	}
	if x := f("bothy_destroy_active"); len(x.Runs) > 0 {
		fmt.Fprintf(b, "- Destroy of an active computer (checkpoint, teardown of sandbox, supervisor and overlay, residue check): %s.\n", spread(x))
	}
	if len(r.Residue) == 0 {
		fmt.Fprintf(b, "- After destroying every computer it created, the bench found no process, mount, cgroup or lease directory of them left, and every lease was released with no residue recorded.\n")
	} else {
		fmt.Fprintf(b, "- **Teardown left residue:**\n")
		for _, x := range r.Residue {
			fmt.Fprintf(b, "  - %s\n", x)
		}
	}

	if len(r.LogWarnings) > 0 {
		fmt.Fprintf(b, "- The server's log holds these warnings and errors:\n")
		for _, k := range slices.Sorted(maps.Keys(r.LogWarnings)) {
			fmt.Fprintf(b, "  - %s (%d)\n", k, r.LogWarnings[k])
		}
	} else {
		fmt.Fprintf(b, "- The server's log holds no warning or error.\n")
	}

	if x := f("bothy_create_1000"); len(x.Runs) > 0 {
		fmt.Fprintf(b, "\n### File operations inside a computer\n\nOne bash script, each step timed inside it with `$EPOCHREALTIME`, run as one command in a computer (its workspace an overlay on this host's ext4, holding a bare git repository of %d files in its lower layer) and with bash in a directory of the same ext4 holding the same repository, alternating. The peer's figures are from its own report, on a 1-vCPU machine, not from this run.\n\n", QuickTree.Files)
		fmt.Fprintf(b, "The tmpfs column runs the same script, alternating with the others, in a tmpfs of its own holding the same repository.\n\n")
		fmt.Fprintf(b, "| operation | bothy | host ext4 | ratio | host tmpfs | bothy / tmpfs | peer's workspace | peer's ext4 |\n|---|---|---|---|---|---|---|---|\n")
		for _, op := range FileOps {
			bo, ho, to := f("bothy_"+op.Key), f("host_"+op.Key), f("tmpfs_"+op.Key)
			peer, peerExt4 := "—", "—"
			if op.PeerMS > 0 {
				peer, peerExt4 = value(op.PeerMS, "ms"), value(op.PeerExt4MS, "ms")
			}
			tx := "—"
			if len(to.Runs) > 0 {
				tx = fmt.Sprintf("%.2fx", ratio(bo.Median, to.Median))
			}
			fmt.Fprintf(b, "| %s | %s | %s | %.2fx | %s | %s | %s | %s |\n", op.Label, spread(bo), spread(ho), ratio(bo.Median, ho.Median), spread(to), tx, peer, peerExt4)
		}
	}
	r.npmMarkdown(b)
	fmt.Fprintf(b, "\n")
}

// npmMarkdown writes the npm section.
func (r *RuntimeReport) npmMarkdown(b *strings.Builder) {
	f := r.Figure
	bo := f("bothy_npm_ci")
	if len(bo.Runs) == 0 || r.Npm == nil {
		return
	}
	n := r.Npm
	fmt.Fprintf(b, "\n### Dependency install (npm)\n\n")
	fmt.Fprintf(b, "`npm ci --offline --cache DIR --no-audit --no-fund --ignore-scripts` of a fixed set (`bench/testdata/npm/`: %s, and what they need) from a local npm cache: %d packages, %s files, %.0f MiB in `node_modules`, from a cache of %.0f MiB. The cache was filled once before anything was timed, by one online `npm ci` through npm's configured registry (%.0f s, untimed). Each side has the project and a copy of the cache on its own file system: the computer in its workspace (the lower layer of its overlay, a new lease each run, untimed), the host in a directory of its ext4 and in a tmpfs, each run in a new directory beside the cache (as each lease writes to a new upper layer); the three alternate. npm alone is timed (bash's `$EPOCHREALTIME` around it, inside the computer for the computer); each run removes `node_modules` afterwards, untimed. Install scripts are not run on any side.\n\n",
		strings.Join(n.Direct, ", "), n.Packages, thousands(n.Files), mib(n.Bytes), mib(n.CacheBytes), n.FillSecs)
	fmt.Fprintf(b, "| where | `npm ci` | ratio to host ext4 | the peer (%s files, 1 vCPU) |\n|---|---|---|---|\n", thousands(peerNpmFiles))
	h, t := f("host_npm_ci"), f("tmpfs_npm_ci")
	fmt.Fprintf(b, "| in a computer | %s | %.2fx | %.1f s (its workspace) |\n", spread(bo), ratio(bo.Median, h.Median), peerNpmSeconds)
	fmt.Fprintf(b, "| host ext4 | %s | 1.00x | %.1f s |\n", spread(h), peerNpmExt4)
	if len(t.Runs) > 0 {
		fmt.Fprintf(b, "| host tmpfs | %s | %.2fx | %.1f s |\n", spread(t), ratio(t.Median, h.Median), peerNpmTmpfs)
	}
	fmt.Fprintf(b, "\nRuns, in order: in a computer %s; host ext4 %s", spreadRuns(bo), spreadRuns(h))
	if len(t.Runs) > 0 {
		fmt.Fprintf(b, "; host tmpfs %s", spreadRuns(t))
	}
	fmt.Fprintf(b, ". By the fastest run of each, the computer takes %.2fx the host's ext4.\n", ratio(bo.Min, h.Min))
	if c := f("bothy_npm_ci_command"); len(c.Runs) > 0 {
		fmt.Fprintf(b, "\nThe whole command through the API, with counting and removing `node_modules` and the checkpoint after it: %s.\n", spread(c))
	}
}

// counts lists a figure's runs as whole numbers.
func counts(f Figure) string {
	var s []string
	for _, v := range f.Runs {
		s = append(s, fmt.Sprintf("%.0f", v))
	}
	return strings.Join(s, ", ")
}

// latencyRow writes a table row: label, p50, p99, min, max, runs.
func latencyRow(b *strings.Builder, f Figure, label string) {
	if len(f.Runs) == 0 {
		return
	}
	fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %d |\n", label, value(f.Median, f.Unit), value(f.P99, f.Unit), value(f.Min, f.Unit), value(f.Max, f.Unit), len(f.Runs))
}

func median(f Figure) string {
	if len(f.Runs) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", f.Median)
}

// supervisorName is " (`PROGRAM`)" naming the program that ran the
// supervisors, or "" for a report that does not say (older JSON).
func supervisorName(program string) string {
	if program == "" {
		return ""
	}
	return " (`" + program + "`)"
}
