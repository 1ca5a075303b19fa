package bench

import (
	"fmt"
	"io"
	"math"
	"os/exec"
	"slices"
	"syscall"
	"time"
)

// Figure is one measured quantity: the median of several runs, with min and max.
type Figure struct {
	Name    string    `json:"name"`
	Unit    string    `json:"unit"`
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	P99     float64   `json:"p99,omitempty"` // for latency figures of many runs
	Runs    []float64 `json:"runs"`
	Command string    `json:"command,omitempty"` // for baselines run through a shell
}

func newFigure(name, unit string, runs []float64) Figure {
	s := slices.Clone(runs)
	slices.Sort(s)
	f := Figure{Name: name, Unit: unit, Runs: runs}
	if len(s) > 0 {
		f.Min, f.Max = s[0], s[len(s)-1]
		if len(s)%2 == 1 {
			f.Median = s[len(s)/2]
		} else {
			f.Median = (s[len(s)/2-1] + s[len(s)/2]) / 2
		}
	}
	return f
}

// newLatency is a figure with its 99th percentile (nearest rank), for
// figures of many runs.
func newLatency(name, unit string, runs []float64) Figure {
	f := newFigure(name, unit, runs)
	f.P99 = percentile(runs, 0.99)
	return f
}

// percentile returns the nearest-rank q-quantile of runs (0 if none).
func percentile(runs []float64, q float64) float64 {
	if len(runs) == 0 {
		return 0
	}
	s := slices.Clone(runs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// timeRuns runs setup (untimed) then fn (timed) n times and returns seconds.
func timeRuns(n int, progress io.Writer, name string, setup func(i int) error, fn func(i int) error) ([]float64, error) {
	var runs []float64
	for i := 0; i < n; i++ {
		if setup != nil {
			if err := setup(i); err != nil {
				return nil, fmt.Errorf("%s: setup: %w", name, err)
			}
		}
		// Write back what earlier runs left dirty, so that no run pays for
		// another's writeback: without this, five untar runs of 500 MiB in a
		// row took 4, 10, 16 and 22 s on the same tree.
		syscall.Sync()
		start := time.Now()
		if err := fn(i); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		d := time.Since(start).Seconds()
		runs = append(runs, d)
		fmt.Fprintf(progress, "  %-34s %.3f s\n", name, d)
	}
	return runs, nil
}

// shell runs a bash command line and returns its error with stderr.
func shell(cmdline string) error {
	out, err := exec.Command("bash", "-o", "pipefail", "-c", cmdline).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", cmdline, err, out)
	}
	return nil
}

// pairRuns alternates n runs of a baseline and a contender (a, b, a, b, …);
// setupB, if set, runs untimed before each run of b.
func pairRuns(n int, progress io.Writer, nameA, nameB string, a, setupB, b func(i int) error) ([]float64, []float64, error) {
	var ra, rb []float64
	for i := 0; i < n; i++ {
		x, err := timeRuns(1, progress, nameA, nil, func(int) error { return a(i) })
		if err != nil {
			return nil, nil, err
		}
		var setup func(int) error
		if setupB != nil {
			setup = func(int) error { return setupB(i) }
		}
		y, err := timeRuns(1, progress, nameB, setup, func(int) error { return b(i) })
		if err != nil {
			return nil, nil, err
		}
		ra, rb = append(ra, x...), append(rb, y...)
	}
	return ra, rb, nil
}
