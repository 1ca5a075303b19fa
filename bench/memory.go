package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/server"
)

type proc struct {
	pid, ppid int
	cmdline   string
	rss, pss  float64 // MiB
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
		pr.rss = statusKiB(filepath.Join(d, "status"), "VmRSS:") / 1024
		out = append(out, pr)
	}
	return out
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

// serveProc is a `bothy serve` run as its own process on a new data
// directory, with its API client.
type serveProc struct {
	cmd    *exec.Cmd
	data   string
	log    string
	client *bhttp.Client
}

// startServe starts `bothy serve` on a new data directory under the
// bench's work directory, named name, and waits for its API.
func startServe(ctx context.Context, opts *RuntimeOptions, name string) (*serveProc, error) {
	dir := filepath.Join(opts.WorkDir, "runtime", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &serveProc{data: filepath.Join(dir, "data"), log: filepath.Join(dir, "serve.log")}
	s.cmd = exec.Command(opts.CLI, "serve", "--data", s.data, "--listen", "127.0.0.1:0")
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	s.cmd.Stderr = logf
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	env := map[string]string{}
	sc := bufio.NewScanner(out)
	for len(env) < 2 && sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "="); ok {
			env[k] = v
		}
	}
	if env["BOTHY_URL"] == "" || !strings.HasPrefix(env["BOTHY_TOKEN"], bothy.TokenPrefix) {
		s.stop()
		return nil, fmt.Errorf("bothy serve printed no URL and token (log: %s)", s.log)
	}
	s.client = bhttp.NewClient(env["BOTHY_URL"], env["BOTHY_TOKEN"])
	for i := 0; ; i++ {
		if err = s.client.Health(ctx); err == nil {
			break
		} else if i == 50 {
			s.stop()
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // let the agent's first poll and the reconciler run
	return s, nil
}

// rss returns the resident set size of the serve process, in MiB.
func (s *serveProc) rss() float64 {
	return statusKiB(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid), "VmRSS:") / 1024
}

// steadyRSS waits a second, then returns the median of five readings of
// the serve process's resident set size, 100 ms apart.
func (s *serveProc) steadyRSS() float64 {
	time.Sleep(time.Second)
	var runs []float64
	for range 5 {
		runs = append(runs, s.rss())
		time.Sleep(100 * time.Millisecond)
	}
	return newFigure("", "MiB", runs).Median
}

// stop stops the serve process with SIGTERM, then SIGKILL after 15 s.
func (s *serveProc) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// serveMemory runs `bothy serve` as its own process on a new data
// directory, creates cold computers through its API, and reads its
// resident set size idle and with them all.
func serveMemory(ctx context.Context, _ *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	p := opts.Progress
	s, err := startServe(ctx, opts, "serve")
	if err != nil {
		return err
	}
	defer s.stop()
	idle := s.rss()
	start := time.Now()
	for i := 0; i < opts.ServeComputers; i++ {
		if _, err := s.client.CreateComputer(ctx, bhttp.CreateComputerRequest{ConversationID: fmt.Sprintf("conv-%d", i/30)}); err != nil {
			return err
		}
	}
	created := time.Since(start)
	for off := 0; off < opts.ServeComputers; off += 1000 {
		if _, err := s.client.ListComputers(ctx, bothy.ComputerFilter{Offset: off, Limit: 1000}); err != nil {
			return err
		}
	}
	full := s.rss()
	peak := statusKiB(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid), "VmHWM:") / 1024
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

// leaseMemory measures what each active lease costs in memory, in a
// `bothy serve` of its own (as an operator runs it: control plane and
// agent in one process, one supervisor process per lease): the serve
// process's resident set size with no lease and with 1, 5 and 10 active
// leases (each the median of five readings), and, for each lease, the
// resident and proportional set sizes of its supervisor (found by its
// command line, which names the lease) and of its sandbox (bwrap and its
// descendants). One lease is started and stopped first, so that what the
// first lease pays once (code paths, pools) is not counted per lease.
func leaseMemory(ctx context.Context, _ *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) (err error) {
	p := opts.Progress
	s, err := startServe(ctx, opts, "serve-leases")
	if err != nil {
		return err
	}
	leases := map[string]bool{}
	var ids []string
	defer func() {
		for _, id := range ids {
			if _, derr := s.client.DestroyComputer(ctx, id); derr != nil && err == nil {
				err = fmt.Errorf("destroy %s: %w", id, derr)
			}
		}
		s.stop()
		rep.Residue = append(rep.Residue, leftovers(s.data, leases)...)
	}()
	n := slices.Max(opts.LeaseCounts)
	for i := range n {
		c, err := s.client.CreateComputer(ctx, bhttp.CreateComputerRequest{Label: fmt.Sprintf("bench-lease-%d", i)})
		if err != nil {
			return err
		}
		ids = append(ids, c.ID)
	}
	start := func(id string) error {
		cmd, err := s.client.RunCommand(ctx, id, bothy.RunRequest{Argv: []string{"true"}, Wait: true})
		if err != nil {
			return err
		}
		leases[cmd.LeaseID] = true
		if cmd.State != bothy.CommandCompleted {
			return fmt.Errorf("command %s on %s: %s (log: %s)", cmd.ID, id, cmd.State, s.log)
		}
		return nil
	}
	if err := start(ids[0]); err != nil {
		return err
	}
	if _, err := s.client.StopComputer(ctx, ids[0]); err != nil {
		return err
	}
	rss := map[int]float64{0: s.steadyRSS()}
	fmt.Fprintf(p, "  %-36s %6.1f MiB\n", "serve RSS, no active lease", rss[0])
	active := 0
	for _, k := range opts.LeaseCounts {
		for ; active < k; active++ {
			if err := start(ids[active]); err != nil {
				return err
			}
		}
		rss[k] = s.steadyRSS()
		fmt.Fprintf(p, "  %-36s %6.1f MiB\n", fmt.Sprintf("serve RSS, %d active leases", k), rss[k])
	}
	procs := readProcs()
	var supRSS, supPSS, boxRSS, boxPSS []float64
	for id := range leases {
		var sr, sp, br, bp float64
		for _, pr := range procs {
			if !strings.Contains(pr.cmdline, id) {
				continue
			}
			switch {
			case isSupervisor(pr.cmdline):
				sr, sp = sr+pr.rss, sp+pr.pss
			case strings.HasPrefix(filepath.Base(strings.Fields(pr.cmdline + " x")[0]), "bwrap"):
				r, ps := tree(procs, pr)
				br, bp = br+r, bp+ps
			}
		}
		if sr > 0 { // the lease started and stopped first has none
			supRSS, supPSS, boxRSS, boxPSS = append(supRSS, sr), append(supPSS, sp), append(boxRSS, br), append(boxPSS, bp)
		}
	}
	for _, k := range append([]int{0}, opts.LeaseCounts...) {
		rep.add(p, newFigure(fmt.Sprintf("bothy_serve_rss_leases_%d", k), "MiB", []float64{rss[k]}))
	}
	lo, hi := opts.LeaseCounts[0], n
	if hi > lo {
		f := newFigure("bothy_serve_rss_per_lease", "MiB", []float64{(rss[hi] - rss[lo]) / float64(hi-lo)})
		f.Command = fmt.Sprintf("(serve RSS with %d active leases - with %d) / %d", hi, lo, hi-lo)
		rep.add(p, f)
	}
	rep.add(p, newFigure("bothy_lease_supervisor_rss", "MiB", supRSS))
	rep.add(p, newFigure("bothy_lease_supervisor_pss", "MiB", supPSS))
	rep.add(p, newFigure("bothy_lease_sandbox_rss", "MiB", boxRSS))
	rep.add(p, newFigure("bothy_lease_sandbox_pss", "MiB", boxPSS))
	rep.LeaseCounts = opts.LeaseCounts
	return nil
}

// tree sums the RSS and PSS of pr and its descendants.
func tree(procs []proc, pr proc) (rss, pss float64) {
	rss, pss = pr.rss, pr.pss
	for _, c := range procs {
		if c.ppid == pr.pid {
			r, ps := tree(procs, c)
			rss, pss = rss+r, pss+ps
		}
	}
	return rss, pss
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

// isSupervisor reports whether a process's command line is a lease's
// supervisor: bothy-supervisor, or the bothy binary's supervisor verb.
func isSupervisor(cmdline string) bool {
	argv0 := filepath.Base(strings.Fields(cmdline + " x")[0])
	return argv0 == server.SupervisorProgram || strings.Contains(cmdline, " supervisor ")
}
