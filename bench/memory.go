package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// leaseMemory reads the memory of each active lease's processes outside
// the agent: its supervisor, and its sandbox (bwrap and the init process
// that holds its namespaces), as proportional set size (shared pages
// divided among the processes that map them), so that shared libraries
// are not counted once per lease.
func leaseMemory(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	p := opts.Progress
	active, err := e.client.ListComputers(ctx, bothy.ComputerFilter{State: bothy.StateActive})
	if err != nil {
		return err
	}
	leases := map[string]bool{}
	for _, c := range active {
		if l, err := e.store.ActiveLease(ctx, e.tenant.ID, c.ID); err == nil {
			leases[l.ID] = true
		}
	}
	if len(leases) == 0 {
		return fmt.Errorf("no active lease to measure")
	}
	procs := readProcs()
	var sup, sandbox []float64
	for id := range leases {
		var s, b float64
		for _, pr := range procs {
			switch {
			case strings.Contains(pr.cmdline, " supervisor ") && strings.Contains(pr.cmdline, id):
				s += pr.pss
			case strings.HasPrefix(filepath.Base(strings.Fields(pr.cmdline + " x")[0]), "bwrap") && strings.Contains(pr.cmdline, id):
				b += pr.pss + descendants(procs, pr.pid)
			}
		}
		sup, sandbox = append(sup, s), append(sandbox, b)
	}
	rep.add(p, newFigure("bothy_lease_supervisor_pss", "MiB", sup))
	rep.add(p, newFigure("bothy_lease_sandbox_pss", "MiB", sandbox))
	return nil
}

type proc struct {
	pid, ppid int
	cmdline   string
	pss       float64 // MiB
}

// readProcs lists the host's processes with their PSS.
func readProcs() []proc {
	var out []proc
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		pr := proc{pid: pid, cmdline: strings.ReplaceAll(string(cmd), "\x00", " ")}
		if st, err := os.ReadFile(filepath.Join(d, "stat")); err == nil {
			// pid (comm) state ppid …: comm may hold spaces, so cut at the last ')'.
			if i := strings.LastIndexByte(string(st), ')'); i > 0 {
				if f := strings.Fields(string(st[i+1:])); len(f) > 1 {
					pr.ppid, _ = strconv.Atoi(f[1])
				}
			}
		}
		pr.pss = statusKiB(filepath.Join(d, "smaps_rollup"), "Pss:") / 1024
		out = append(out, pr)
	}
	return out
}

// descendants sums the PSS of pid's descendants.
func descendants(procs []proc, pid int) float64 {
	var sum float64
	for _, pr := range procs {
		if pr.ppid == pid {
			sum += pr.pss + descendants(procs, pr.pid)
		}
	}
	return sum
}

// statusKiB reads a "Key: N kB" line of a /proc file.
func statusKiB(path, key string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			n, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return n
		}
	}
	return 0
}

// serveMemory runs `bothy serve` as its own process on a new data
// directory, creates cold computers through its API, and reads its
// resident set size idle and with them all.
func serveMemory(ctx context.Context, _ *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	p := opts.Progress
	dir := filepath.Join(opts.WorkDir, "runtime", "serve")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cmd := exec.Command(opts.CLI, "serve", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0")
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	env := map[string]string{}
	sc := bufio.NewScanner(out)
	for len(env) < 2 && sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "="); ok {
			env[k] = v
		}
	}
	if env["BOTHY_URL"] == "" || !strings.HasPrefix(env["BOTHY_TOKEN"], bothy.TokenPrefix) {
		return fmt.Errorf("bothy serve printed no URL and token (log: %s)", logf.Name())
	}
	cl := bhttp.NewClient(env["BOTHY_URL"], env["BOTHY_TOKEN"])
	for i := 0; ; i++ {
		if err = cl.Health(ctx); err == nil {
			break
		} else if i == 50 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // let the agent's first poll and the reconciler run
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	idle := statusKiB(status, "VmRSS:") / 1024
	start := time.Now()
	for i := 0; i < opts.ServeComputers; i++ {
		if _, err := cl.CreateComputer(ctx, bhttp.CreateComputerRequest{ConversationID: fmt.Sprintf("conv-%d", i/30)}); err != nil {
			return err
		}
	}
	created := time.Since(start)
	for off := 0; off < opts.ServeComputers; off += 1000 {
		if _, err := cl.ListComputers(ctx, bothy.ComputerFilter{Offset: off, Limit: 1000}); err != nil {
			return err
		}
	}
	full := statusKiB(status, "VmRSS:") / 1024
	peak := statusKiB(status, "VmHWM:") / 1024
	fmt.Fprintf(p, "  bothy serve RSS: %.1f MiB idle, %.1f MiB with %d cold computers (peak %.1f MiB); created in %s\n",
		idle, full, opts.ServeComputers, peak, created.Round(time.Millisecond))
	f := newFigure("baseline_serve_rss_idle", "MiB", []float64{idle})
	f.Command = "bothy serve, no computer"
	rep.add(p, f)
	rep.add(p, newFigure("bothy_serve_rss_cold_computers", "MiB", []float64{full}))
	rep.add(p, newFigure("bothy_serve_create_computers", "ms", []float64{ms(created)}))
	rep.ServeComputers = opts.ServeComputers
	return nil
}

// destroyActive destroys every active computer, one at a time, and times
// each: checkpoint, teardown of the sandbox, supervisor and overlay, and
// the residue check the agent records.
func destroyActive(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	active, err := e.client.ListComputers(ctx, bothy.ComputerFilter{State: bothy.StateActive})
	if err != nil {
		return err
	}
	var runs []float64
	for _, c := range active {
		d, err := timed(func() error { _, err := e.client.DestroyComputer(ctx, c.ID); return err })
		if err != nil {
			return err
		}
		runs = append(runs, d)
	}
	rep.add(opts.Progress, newFigure("bothy_destroy_active", "ms", runs))
	return nil
}
