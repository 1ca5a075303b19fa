package bench

import (
	"fmt"
	"io"
	"os/exec"
	"slices"
	"time"
)

// Figure is one measured quantity: the median of several runs, with min and max.
type Figure struct {
	Name    string    `json:"name"`
	Unit    string    `json:"unit"`
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
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

// timeRuns runs setup (untimed) then fn (timed) n times and returns seconds.
func timeRuns(n int, progress io.Writer, name string, setup func(i int) error, fn func(i int) error) ([]float64, error) {
	var runs []float64
	for i := 0; i < n; i++ {
		if setup != nil {
			if err := setup(i); err != nil {
				return nil, fmt.Errorf("%s: setup: %w", name, err)
			}
		}
		start := time.Now()
		if err := fn(i); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		d := time.Since(start).Seconds()
		runs = append(runs, d)
		fmt.Fprintf(progress, "  %-34s run %d/%d: %.3f s\n", name, i+1, n, d)
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
