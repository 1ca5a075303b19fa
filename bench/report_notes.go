package bench

import (
	"fmt"
	"strings"
)

// missesMarkdown writes, for each missed goal, what the figures of the
// same run show of its cause, and what is not measured yet.
func (r *Report) missesMarkdown(b *strings.Builder) {
	var missed []Goal
	for _, g := range r.Goals {
		if !g.Met && g.Skipped == "" {
			missed = append(missed, g)
		}
	}
	if len(missed) > 0 {
		fmt.Fprintf(b, "## Where the goals are missed\n\n")
		for _, g := range missed {
			fmt.Fprintf(b, "- **%s**: %s", g.Scenario, value(g.Value, g.Unit))
			if g.Baseline != "" {
				fmt.Fprintf(b, ", %.2fx %s", g.Ratio, g.BaselineLabel)
			}
			fmt.Fprintf(b, " (goal %s). %s\n", g.Goal, r.why(g))
		}
		fmt.Fprintf(b, "\n")
	}
	r.problemsMarkdown(b)
	r.skippedMarkdown(b)
	fmt.Fprintf(b, "## Not measured yet\n\n")
	fmt.Fprintf(b, "- Every figure with a cold page cache: each scenario here reads what the host has just written or read.\n")
	fmt.Fprintf(b, "- The gvisor provider: every computer here runs on bwrap.\n")
	fmt.Fprintf(b, "- Admission through the HTTP API and across several replicas: the admission figures call the control plane in-process, one replica.\n\n")
}

// why explains a missed goal from the run's own figures, where they show
// the cause.
func (r *Report) why(g Goal) string {
	if r.Runtime == nil {
		return r.runs(g)
	}
	f := r.Runtime.Figure
	switch g.Figure {
	case "bothy_api_true":
		run, bw := f("bothy_api_true_run").Median, f("baseline_bwrap_true").Median
		var rest float64
		for _, ph := range phaseNames {
			if ph != "run" {
				rest += f("bothy_api_true_" + ph).Median
			}
		}
		return fmt.Sprintf("By the command's own timestamps, the process's run through the provider's exec chain alone is %s (plain bwrap: %s): each command starts a root `perl` program (it moves itself into the lease's cgroups, enters the sandbox's namespaces, drops to the lease's uid and installs the seccomp filter) and a `bash` wrapper before the command, where plain bwrap starts itself and the command. The other phases add %s: dispatch through the agent's long poll, the supervisor journaling the command (fsync) before starting it, the checkpoint scan of the writable layer after it, and the events and end recorded in SQLite. Closing it needs a shorter exec chain (one helper that enters cgroups and namespaces and drops privileges, or a process inside the sandbox that forks commands) and a cheaper end of command when the workspace did not change.",
			value(run, "ms"), value(bw, "ms"), value(rest, "ms"))
	case "bothy_cold_start_warm_cache", "bothy_cold_start_cold_cache":
		prefix := g.Figure + "_"
		return fmt.Sprintf("Of the median, %s is the dispatch phase, which for a cold computer holds the lease start: the agent's poll, materializing the base revision (a restore from the blob store when the host cache is cold), the overlay mount, the sandbox (bwrap, cgroups) and spawning the supervisor (bothy-supervisor, or the bothy binary); then %s to run `true` through the exec chain and %s to finish.",
			value(f(prefix+"dispatch").Median, "ms"), value(f(prefix+"run").Median, "ms"), value(f(prefix+"finish").Median, "ms"))
	case "bothy_stat_1000":
		return fmt.Sprintf("`stat` resolves owner and group names; the lease's uid has its own entry (bothy) in the sandbox's /etc/passwd and /etc/group. Without names (`stat -c '%%s %%Y'`) the same 1000 files take %s in the computer against %s on the host, so what remains is the lookups through the overlay, or this shared host's noise. "+r.runs(g),
			value(f("bothy_stat_1000_numeric").Median, "ms"), value(f("host_stat_1000_numeric").Median, "ms"))
	case "bothy_git_clone":
		return fmt.Sprintf("A local clone hardlinks the repository's objects; in the computer they are in the overlay's lower layer, so overlayfs first copies each one up before it can link it: 2,000 copies where the host makes 2,000 links. The writable layer is a `volatile` overlay (no fsync of the copies; in the full runs before and after that change the clone's median went from 2.19 s to 1.41 s), so what remains is the copying itself. Without hardlinks (`git clone --no-hardlinks`, which copies on both sides) the clone takes %s in the computer against %s on the host. Restoring the base revision as part of the upper layer (no lower layer to copy up from) would close it, at the cost of a full copy at every start.",
			value(f("bothy_git_clone_copy").Median, "ms"), value(f("host_git_clone_copy").Median, "ms"))
	case "bothy_npm_ci":
		return fmt.Sprintf("npm writes every file of `node_modules` through the overlay into its upper layer; in the same run, creating 1000 small files took %.2fx as long in the computer as on the host's ext4, and the file-operation steps on tmpfs show what the disk itself costs. %s",
			ratio(f("bothy_create_1000").Median, f("host_create_1000").Median), r.runs(g))
	case "bothy_rm_1000":
		return "By hand on this host, a plain overlay with no sandbox shows most of it: `rm` of 1000 fresh files took 13.1 ms through an overlay against 9.9 ms on the ext4 beneath (overlayfs checks the lower layer for each name it removes). " + r.runs(g)
	}
	return r.runs(g)
}

// runs lists the runs of a goal's figure and of its baseline, for a miss
// whose cause the figures do not show.
func (r *Report) runs(g Goal) string {
	fig := func(name string) Figure {
		if r.Runtime != nil {
			if f := r.Runtime.Figure(name); f.Name != "" {
				return f
			}
		}
		if r.StorageReport != nil {
			return r.StorageReport.Figure(name)
		}
		return Figure{}
	}
	s := "Runs: " + spreadRuns(fig(g.Figure))
	if g.Baseline != "" {
		s += "; baseline " + spreadRuns(fig(g.Baseline))
	}
	return s + ". No cause shown by this run's figures; this 2-CPU host is shared, so a slow stretch moves a median of few runs."
}

// spreadRuns lists a figure's runs.
func spreadRuns(f Figure) string {
	var s []string
	for _, v := range f.Runs {
		s = append(s, trim(v))
	}
	return strings.Join(s, ", ") + " " + f.Unit
}

// problemsMarkdown writes what the run showed wrong in the runtime, from
// its figures and the server's log.
func (r *Report) problemsMarkdown(b *strings.Builder) {
	rt := r.Runtime
	if rt == nil {
		return
	}
	var items []string
	if n := rt.LogWarnings["WARN: command stream broke; resuming"]; n > 0 {
		s := fmt.Sprintf("The agent logged \"command stream broke; resuming\" %d times. A poll answer built while a command was still `running` in the store (its exit event stored, its end not yet recorded: the agent was checkpointing) reaches the agent after that command's stream has ended, and its `attach` starts a new stream after the last seq; the supervisor answers a stream after a finished command's last event with EOF, which the agent takes for a broken stream and retries forever (backing off to 2 s), until the lease is torn down.", n)
		if st := rt.Figure("bothy_stop_15_at_once"); st.Max > 30000 {
			s += fmt.Sprintf(" A stop waits for every stream of its lease for up to a minute, so stopping the 15 computers took up to %s.", value(st.Max, "ms"))
		}
		items = append(items, s+" The supervisor could end such a stream with the command's end, or the agent could ask the supervisor's status before resuming.")
	}
	if st := rt.Figure("bothy_cold_start_stop"); len(st.Runs) > 0 && st.Min >= 50 && st.Median < 60 {
		items = append(items, fmt.Sprintf("Every stop takes just over 50 ms (median %s): the control plane polls the store every 50 ms for the lease's release instead of being told; the teardown itself is faster.", value(st.Median, "ms")))
	}
	if st := rt.Figure("bothy_large_cold_start_stop"); len(st.Runs) >= 3 {
		// Stops alternate: after the first start (which restored the
		// tree), after a start on a warm cache, after one on a cold cache…
		var fresh, cached []float64
		for i, v := range st.Runs {
			if i%2 == 0 {
				fresh = append(fresh, v)
			} else {
				cached = append(cached, v)
			}
		}
		a, c := newFigure("", "ms", fresh), newFigure("", "ms", cached)
		if a.Median > 3*c.Median {
			items = append(items, fmt.Sprintf("Stopping the computer with the large workspace takes %s when its start had restored the tree into the host cache, and %s when the tree was cached already: the stop pays for writing back the restored tree, because unmounting an overlay syncs the file system beneath it (by hand on this host: 186 ms to unmount an overlay with 400 MiB dirty on the ext4 beneath, 4 ms with none). That is %s once after each start that restored its base.",
				value(a.Median, "ms"), value(c.Median, "ms"), value(a.Median-c.Median, "ms")))
		}
	}
	if len(rt.Residue) > 0 {
		items = append(items, fmt.Sprintf("Teardown left residue (%d items, listed under Computers).", len(rt.Residue)))
	}
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(b, "## Problems this run showed\n\n")
	for _, it := range items {
		fmt.Fprintf(b, "- %s\n", it)
	}
	fmt.Fprintf(b, "\n")
}
