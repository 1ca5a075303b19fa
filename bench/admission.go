package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/control"
	"github.com/bothyhq/bothy/postgres"
	"github.com/bothyhq/bothy/sqlite"
)

// EnvPostgresURL names the PostgreSQL server the admission bench uses,
// as the tests do (postgres/pgtest; scripts/pg-test-env prints a value).
const EnvPostgresURL = "BOTHY_TEST_POSTGRES_URL"

// AdmissionOptions configure RunAdmission. Zero counts take the full
// run's defaults.
type AdmissionOptions struct {
	WorkDir string // the SQLite file goes here
	// Postgres is the URL of a PostgreSQL server whose role may create
	// databases; the bench creates a database of its own there and drops
	// it at the end. "" skips PostgreSQL, and PostgresSkip says why.
	Postgres     string
	PostgresSkip string
	Ops          int   // operations per round (300)
	Rounds       int   // rounds per figure (3)
	Workers      []int // concurrent callers ({1, 8})
	// Busy is how many commands the computer of the "busy" scenario holds
	// before its first round (1000).
	Busy     int
	Progress io.Writer
}

// AdmissionReport holds the admission and reservation throughput of
// each store.
type AdmissionReport struct {
	Ops             int    `json:"ops"`
	Rounds          int    `json:"rounds"`
	Workers         []int  `json:"workers"`
	Busy            int    `json:"busy_commands"`
	PostgresVersion string `json:"postgres_version,omitempty"`
	// PostgresSyncCommit is synchronous_commit in the bench's database.
	PostgresSyncCommit string   `json:"postgres_synchronous_commit,omitempty"`
	Figures            []Figure `json:"figures"`
	Skipped            []Skip   `json:"skipped,omitempty"`
}

// Figure returns the named figure.
func (r *AdmissionReport) Figure(name string) Figure {
	for _, f := range r.Figures {
		if f.Name == name {
			return f
		}
	}
	return Figure{}
}

// The admission scenarios, in the order they run. Figures are named
// admission_STORE_KEY_wN, in operations per second.
var admissionKinds = []struct{ Key, Label string }{
	{"cold", "`RunCommand` on a cold computer (admits the command and reserves a lease)"},
	{"leased", "`RunCommand` on a computer that has a lease (admits the command)"},
	{"busy", "`RunCommand` on a computer that has a lease and %s earlier commands"},
	{"reserve", "`AcquireLease` on a cold computer (the reservation alone)"},
}

// busyOps is how many commands each round of the "busy" scenario admits.
const busyOps = 50

// RunAdmission measures how many commands the control plane admits per
// second, and how many lease reservations the store makes, on SQLite (a
// new file, as `bothy serve` opens it) and on PostgreSQL. It calls the
// control plane (control.Controller, as the API does, with no agent, so
// nothing is dispatched or started) and the store directly, from 1 and 8
// concurrent callers, each round on computers of its own.
func RunAdmission(ctx context.Context, opts AdmissionOptions) (*AdmissionReport, error) {
	if opts.Ops <= 0 {
		opts.Ops = 300
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 3
	}
	if len(opts.Workers) == 0 {
		opts.Workers = []int{1, 8}
	}
	if opts.Busy <= 0 {
		opts.Busy = 1000
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	rep := &AdmissionReport{Ops: opts.Ops, Rounds: opts.Rounds, Workers: opts.Workers, Busy: opts.Busy}
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(opts.WorkDir, "admission.db")
	os.Remove(path)
	lite, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Progress, "SQLite (%s)\n", path)
	err = admit(ctx, "sqlite", lite, &opts, rep)
	lite.Close()
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if opts.Postgres == "" {
		rep.Skipped = append(rep.Skipped, Skip{"admission on PostgreSQL", opts.PostgresSkip})
		return rep, nil
	}
	pg, drop, version, err := openBenchPostgres(ctx, opts.Postgres)
	if err != nil {
		rep.Skipped = append(rep.Skipped, Skip{"admission on PostgreSQL", err.Error()})
		return rep, nil
	}
	rep.PostgresVersion = strings.Fields(version + " ?")[0]
	if err := pg.SQL().QueryRowContext(ctx, "SHOW synchronous_commit").Scan(&rep.PostgresSyncCommit); err != nil {
		pg.Close()
		return nil, errors.Join(err, drop())
	}
	fmt.Fprintf(opts.Progress, "PostgreSQL %s\n", version)
	err = admit(ctx, "postgres", pg, &opts, rep)
	pg.Close()
	if derr := drop(); err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return rep, nil
}

// admit runs the admission scenarios on one store.
func admit(ctx context.Context, name string, store bothy.Store, opts *AdmissionOptions, rep *AdmissionReport) error {
	p := opts.Progress
	tenant, err := bothy.NewTenant("bench", "bench")
	if err != nil {
		return err
	}
	if err := store.CreateTenant(ctx, tenant); err != nil {
		return err
	}
	ctl := control.New(store, control.Config{Profiles: map[string]string{"standard": "bwrap"}, Logger: slog.New(slog.DiscardHandler)})
	// computers creates n cold computers, untimed, 8 at a time.
	computers := func(n int) ([]string, error) {
		ids := make([]string, n)
		err := parallel(8, n, func(i int) error {
			c := &bothy.Computer{ID: "cmp_" + randomHex(12), TenantID: tenant.ID, Profile: "standard"}
			ids[i] = c.ID
			return store.CreateComputer(ctx, c)
		})
		return ids, err
	}
	run := func(id string) error {
		cmd, created, err := ctl.RunCommand(ctx, tenant.ID, id, bothy.RunRequest{Argv: []string{"true"}})
		if err == nil && (!created || cmd.State != bothy.CommandAdmitted) {
			err = fmt.Errorf("command %s: created %v, state %s", cmd.ID, created, cmd.State)
		}
		return err
	}
	var busy string
	for _, kind := range admissionKinds {
		for _, w := range opts.Workers {
			var rates []float64
			for r := 0; r < opts.Rounds; r++ {
				var op func(i int) error
				ops := opts.Ops
				switch kind.Key {
				case "cold":
					ids, err := computers(opts.Ops)
					if err != nil {
						return err
					}
					op = func(i int) error { return run(ids[i]) }
				case "leased":
					// One computer per caller, its lease reserved by a
					// first command, untimed.
					ids, err := computers(w)
					if err != nil {
						return err
					}
					for _, id := range ids {
						if err := run(id); err != nil {
							return err
						}
					}
					op = func(i int) error { return run(ids[i%w]) }
				case "busy":
					// One computer for every round, which holds
					// opts.Busy commands before the first (made untimed).
					if busy == "" {
						ids, err := computers(1)
						if err != nil {
							return err
						}
						busy = ids[0]
						fmt.Fprintf(p, "  admitting %d commands on one computer (untimed)\n", opts.Busy)
						for range opts.Busy {
							if err := run(busy); err != nil {
								return err
							}
						}
					}
					ops = busyOps
					op = func(int) error { return run(busy) }
				case "reserve":
					ids, err := computers(opts.Ops)
					if err != nil {
						return err
					}
					op = func(i int) error {
						return store.AcquireLease(ctx, &bothy.Lease{ID: "lse_" + randomHex(12), TenantID: tenant.ID, ComputerID: ids[i],
							Generation: 1, Provider: "bwrap", ExpiresAt: time.Now().Add(time.Minute)})
					}
				}
				d, err := timed(func() error { return parallel(w, ops, op) })
				if err != nil {
					return fmt.Errorf("%s, %d callers: %w", kind.Key, w, err)
				}
				rates = append(rates, float64(ops)/(d/1000))
			}
			f := newFigure(fmt.Sprintf("admission_%s_%s_w%d", name, kind.Key, w), "ops/s", rates)
			rep.Figures = append(rep.Figures, f)
			fmt.Fprintf(p, "  = %-36s p50 %8.0f  min %8.0f  max %8.0f %s (%d rounds)\n", f.Name, f.Median, f.Min, f.Max, f.Unit, len(f.Runs))
		}
	}
	return nil
}

// parallel runs fn(0) … fn(n-1) on w goroutines and returns the first
// error; after one, the rest are not started.
func parallel(w, n int, fn func(i int) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// openBenchPostgres creates a database of the bench's own on the server
// of admin, opens the store on it, and returns a function that drops it,
// and the server's version. The database keeps the server's settings
// (synchronous_commit on, unless the server says otherwise), as a
// production server would.
func openBenchPostgres(ctx context.Context, admin string) (*postgres.Store, func() error, string, error) {
	name := "bothy_bench_" + randomHex(8)
	u, err := postgres.CreateDatabase(ctx, admin, name)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", EnvPostgresURL, err)
	}
	drop := func() error { return postgres.DropDatabase(context.Background(), admin, name) }
	s, err := postgres.Open(ctx, u)
	if err != nil {
		return nil, nil, "", errors.Join(err, drop())
	}
	var version string
	if err := s.SQL().QueryRowContext(ctx, "SHOW server_version").Scan(&version); err != nil {
		s.Close()
		return nil, nil, "", errors.Join(err, drop())
	}
	return s, drop, version, nil
}
