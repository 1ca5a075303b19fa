package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// warmTrue times `true` through the API on a computer with a warm lease,
// and through the CLI, alternating with plain fork/exec of /bin/true and
// plain `bwrap … true`.
func warmTrue(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	p := opts.Progress
	c, err := e.create(ctx, bhttp.CreateComputerRequest{Label: "bench-warm"})
	if err != nil {
		return err
	}
	trueReq := bothy.RunRequest{Argv: []string{"true"}}
	for i := 0; i < 5; i++ { // start the lease, then warm every path up
		if _, err := e.run(ctx, c.ID, trueReq); err != nil {
			return err
		}
	}
	cliEnv := append(os.Environ(), "BOTHY_URL="+e.url, "BOTHY_TOKEN="+e.token)
	var execRuns, bwrapRuns, apiRuns, cliRuns []float64
	ph := phases{}
	for i := 0; i < opts.WarmRuns; i++ {
		d, err := timed(func() error { return exec.Command("/bin/true").Run() })
		if err != nil {
			return err
		}
		execRuns = append(execRuns, d)
		if d, err = timed(plainBwrap); err != nil {
			return err
		}
		bwrapRuns = append(bwrapRuns, d)
		if d, _, err = e.timedRun(ctx, c.ID, trueReq, ph); err != nil {
			return err
		}
		apiRuns = append(apiRuns, d)
		if opts.CLI != "" && i < opts.CLIRuns {
			d, err = timed(func() error {
				cli := exec.Command(opts.CLI, "run", c.ID, "--", "true")
				cli.Env = cliEnv
				if out, err := cli.CombinedOutput(); err != nil {
					return fmt.Errorf("bothy run: %w: %s", err, out)
				}
				return nil
			})
			if err != nil {
				return err
			}
			cliRuns = append(cliRuns, d)
		}
		if (i+1)%50 == 0 {
			fmt.Fprintf(p, "  %d/%d runs\n", i+1, opts.WarmRuns)
		}
	}
	f := newLatency("baseline_exec_true", "ms", execRuns)
	f.Command = "fork/exec /bin/true (os/exec)"
	rep.add(p, f)
	f = newLatency("baseline_bwrap_true", "ms", bwrapRuns)
	f.Command = "bwrap --ro-bind / / --unshare-all --die-with-parent true"
	rep.add(p, f)
	rep.add(p, newLatency("bothy_api_true", "ms", apiRuns))
	ph.figures(rep, p, "bothy_api_true")
	if len(cliRuns) > 0 {
		rep.add(p, newLatency("bothy_cli_true", "ms", cliRuns))
	}
	return nil
}

func plainBwrap() error {
	return exec.Command("bwrap", "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true").Run()
}

// timed returns fn's wall time in milliseconds.
// runOnNewLease stops the computer and starts a new lease with `true`
// (untimed), so that its workspace is all in the lower layer, syncs the
// disks, then runs script and returns the command and its wall time in
// milliseconds.
func runOnNewLease(ctx context.Context, e *serverEnv, id, script string, timeout time.Duration) (*bothy.Command, float64, error) {
	if _, err := e.client.StopComputer(ctx, id); err != nil {
		return nil, 0, err
	}
	if _, err := e.run(ctx, id, bothy.RunRequest{Argv: []string{"true"}}); err != nil {
		return nil, 0, err
	}
	syscall.Sync()
	var cmd *bothy.Command
	wall, err := timed(func() error {
		var err error
		cmd, err = e.run(ctx, id, bothy.RunRequest{Script: script, TimeoutMS: timeout.Milliseconds()})
		return err
	})
	return cmd, wall, err
}

func timed(fn func() error) (float64, error) {
	start := time.Now()
	err := fn()
	return ms(time.Since(start)), err
}

// phaseNames are the steps of a command through the API, by its own
// timestamps (one host, one clock): admit is the request until the
// command is journaled (created_at); dispatch until the agent's poll
// took it (dispatched_at; for a cold computer this waits for the lease to
// start); start until the supervisor journaled and started it
// (started_at); run is the process's own duration (duration_ms, whole
// milliseconds) through the provider's exec; finish is the rest until the
// control plane recorded its end (finished_at: output, the checkpoint of
// the workspace, the report); answer is from then to the client's
// decoded answer.
var phaseNames = []string{"admit", "dispatch", "start", "run", "finish", "answer"}

// phases collects the phases of several commands.
type phases map[string][]float64

// add records the phases of cmd, sent at sent and answered at got.
func (p phases) add(sent, got time.Time, cmd *bothy.Command) {
	run := float64(cmd.DurationMS)
	for name, v := range map[string]float64{
		"admit":    ms(cmd.CreatedAt.Sub(sent)),
		"dispatch": ms(cmd.DispatchedAt.Sub(cmd.CreatedAt)),
		"start":    ms(cmd.StartedAt.Sub(cmd.DispatchedAt)),
		"run":      run,
		"finish":   ms(cmd.FinishedAt.Sub(cmd.StartedAt)) - run,
		"answer":   ms(got.Sub(cmd.FinishedAt)),
	} {
		p[name] = append(p[name], v)
	}
}

// figures adds a figure per phase, named PREFIX_PHASE.
func (p phases) figures(rep *RuntimeReport, w io.Writer, prefix string) {
	for _, name := range phaseNames {
		rep.add(w, newFigure(prefix+"_"+name, "ms", p[name]))
	}
}

// timedRun runs a command through the API and returns its wall time in
// milliseconds, recording its phases.
func (e *serverEnv) timedRun(ctx context.Context, id string, req bothy.RunRequest, ph phases) (float64, *bothy.Command, error) {
	sent := time.Now()
	cmd, err := e.run(ctx, id, req)
	got := time.Now()
	if err != nil {
		return 0, nil, err
	}
	ph.add(sent, got, cmd)
	return ms(got.Sub(sent)), cmd, nil
}

// streamLatency runs a command that prints the time every 20 ms (bash's
// $EPOCHREALTIME, no fork) and reads its event stream: the latency of a
// line is when the client decoded it minus when it was printed, on one
// host and one clock. The baseline runs the same script with bash on the
// host and reads its stdout through a pipe.
func streamLatency(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	p := opts.Progress
	c, err := e.create(ctx, bhttp.CreateComputerRequest{Label: "bench-stream"})
	if err != nil {
		return err
	}
	if _, err := e.run(ctx, c.ID, bothy.RunRequest{Argv: []string{"true"}}); err != nil {
		return err
	}
	script := fmt.Sprintf("sleep 0.2; for i in $(seq %d); do echo $EPOCHREALTIME; sleep %.3f; done", opts.StreamLines, streamEvery.Seconds())
	var pipe, api []float64
	for i := 0; i < opts.StreamRuns; i++ {
		lat, err := pipeLatency(script)
		if err != nil {
			return err
		}
		pipe = append(pipe, lat...)
		fmt.Fprintf(p, "  %-36s p50 %6.2f ms\n", "baseline pipe", newFigure("", "", lat).Median)
		lat, early, err := sseLatency(ctx, e, c.ID, script)
		if err != nil {
			return err
		}
		rep.StreamEarly += early
		api = append(api, lat...)
		fmt.Fprintf(p, "  %-36s p50 %6.2f ms\n", "bothy SSE", newFigure("", "", lat).Median)
	}
	f := newLatency("baseline_pipe_stream_latency", "ms", pipe)
	f.Command = "bash -c SCRIPT on the host, stdout read through a pipe"
	rep.add(p, f)
	rep.add(p, newLatency("bothy_stream_latency", "ms", api))
	return nil
}

// sseLatency runs script on the computer and returns the latency of each
// line it received over the event stream, and how many lines were printed
// before the stream was open (left out).
func sseLatency(ctx context.Context, e *serverEnv, id, script string) ([]float64, int, error) {
	cmd, err := e.client.RunCommand(ctx, id, bothy.RunRequest{Script: script})
	if err != nil {
		return nil, 0, err
	}
	s, err := e.client.Events(ctx, cmd.ID, 0)
	if err != nil {
		return nil, 0, err
	}
	defer s.Close()
	open := time.Now()
	var lat []float64
	var early int
	var partial string
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, 0, err
		}
		now := time.Now()
		if ev.Kind != bothy.EventStdout {
			continue
		}
		text := partial + string(ev.Data)
		lines := strings.Split(text, "\n")
		partial = lines[len(lines)-1]
		for _, ln := range lines[:len(lines)-1] {
			t, err := parseEpoch(ln)
			if err != nil {
				return nil, 0, err
			}
			if t.Before(open) {
				early++
				continue
			}
			lat = append(lat, ms(now.Sub(t)))
		}
	}
	if final := s.Command(); final == nil {
		return nil, 0, errors.New("stream ended without the command")
	} else if err := e.check(final); err != nil {
		return nil, 0, err
	}
	return lat, early, nil
}

// pipeLatency runs script with bash on the host and returns the latency of
// each line read from its stdout pipe.
func pipeLatency(script string) ([]float64, error) {
	cmd := exec.Command("bash", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var lat []float64
	r := bufio.NewReader(out)
	for {
		ln, err := r.ReadString('\n')
		if err == io.EOF {
			break
		} else if err != nil {
			cmd.Wait()
			return nil, err
		}
		now := time.Now()
		t, err := parseEpoch(strings.TrimSuffix(ln, "\n"))
		if err != nil {
			cmd.Wait()
			return nil, err
		}
		lat = append(lat, ms(now.Sub(t)))
	}
	return lat, cmd.Wait()
}

// parseEpoch parses bash's $EPOCHREALTIME: seconds, a point, microseconds.
func parseEpoch(s string) (time.Time, error) {
	sec, frac, ok := strings.Cut(strings.TrimSpace(s), ".")
	a, err1 := strconv.ParseInt(sec, 10, 64)
	b, err2 := strconv.ParseInt(frac, 10, 64)
	if !ok || err1 != nil || err2 != nil || len(frac) != 6 {
		return time.Time{}, fmt.Errorf("not an $EPOCHREALTIME: %q", s)
	}
	return time.Unix(a, b*1000), nil
}
