package gvisor_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/providertest"
)

// BenchmarkExecTrue measures `true` through Exec (nsenter, runsc exec,
// the sentry) in a running sandbox, and reports the median.
func BenchmarkExecTrue(b *testing.B) {
	p := newProvider(b)
	h, _ := providertest.Start(b, p, bothy.LeaseSpec{})
	var d []time.Duration
	for b.Loop() {
		start := time.Now()
		if res, err := p.Exec(context.Background(), h, bothy.ExecSpec{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		d = append(d, time.Since(start))
	}
	reportMedian(b, d)
}

// BenchmarkStart measures Start of a sandbox over an empty workspace: the
// network namespace, the bundle and `runsc run --detach`. Stop is not
// timed; its median is reported as stop-ms.
func BenchmarkStart(b *testing.B) {
	p := newProvider(b)
	ctx := context.Background()
	var starts, stops []time.Duration
	for b.Loop() {
		spec := bothy.LeaseSpec{LeaseID: providertest.NewID("lease"), ComputerID: "c1", Generation: 1, Workspace: b.TempDir()}
		start := time.Now()
		h, err := p.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		starts = append(starts, time.Since(start))
		b.StopTimer()
		start = time.Now()
		if res, err := p.Stop(ctx, h); err != nil {
			b.Fatal(res, err)
		}
		stops = append(stops, time.Since(start))
		b.StartTimer()
	}
	reportMedian(b, starts)
	slices.Sort(stops)
	b.ReportMetric(float64(stops[len(stops)/2].Microseconds())/1000, "stop-ms")
}

func reportMedian(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d[len(d)*9/10].Microseconds())/1000, "p90-ms")
}
