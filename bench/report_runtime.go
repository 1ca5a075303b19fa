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
	if x := f("bothy_lease_supervisor_pss"); len(x.Runs) > 0 {
		fmt.Fprintf(b, "- Memory of each lease outside the agent, as proportional set size over %d leases: supervisor %s, sandbox (bwrap and its init) %s. The agent runs in the server's process here, so its share per lease is not separated.\n",
			len(x.Runs), spread(x), spread(f("bothy_lease_sandbox_pss")))
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
		fmt.Fprintf(b, "| operation | bothy | host ext4 | ratio | peer's workspace | peer's ext4 |\n|---|---|---|---|---|---|\n")
		for _, op := range FileOps {
			bo, ho := f("bothy_"+op.Key), f("host_"+op.Key)
			peer, peerExt4 := "—", "—"
			if op.PeerMS > 0 {
				peer, peerExt4 = value(op.PeerMS, "ms"), value(op.PeerExt4MS, "ms")
			}
			fmt.Fprintf(b, "| %s | %s | %s | %.2fx | %s | %s |\n", op.Label, spread(bo), spread(ho), ratio(bo.Median, ho.Median), peer, peerExt4)
		}
	}
	fmt.Fprintf(b, "\n")
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
