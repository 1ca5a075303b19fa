package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/checkpoint"
	"github.com/bothyhq/bothy/localblob"
	"github.com/bothyhq/bothy/sqlite"
)

// StorageOptions configure RunStorage.
type StorageOptions struct {
	Tree     TreeSpec
	Runs     int       // runs per figure; the median is reported
	Edits    int       // files changed before each incremental checkpoint
	WorkDir  string    // scratch space on the disk under test
	Progress io.Writer // progress lines; nil discards
}

// StorageReport holds the storage figures and their baselines from one run.
type StorageReport struct {
	Date       time.Time        `json:"date"`
	GoVersion  string           `json:"go_version"`
	CPUs       int              `json:"cpus"`
	Tree       TreeSpec         `json:"tree"`
	TreeFiles  int              `json:"tree_files"`
	TreeBytes  int64            `json:"tree_bytes"`
	Edits      int              `json:"edits"`
	Figures    []Figure         `json:"figures"`
	StoredSize int64            `json:"stored_bytes"`      // packs after a full checkpoint
	TarZstSize int64            `json:"tar_zst_bytes"`     // the baseline archive
	Incr       checkpoint.Stats `json:"incremental_stats"` // of the last incremental checkpoint
}

// Figure returns the named figure.
func (r *StorageReport) Figure(name string) Figure {
	for _, f := range r.Figures {
		if f.Name == name {
			return f
		}
	}
	return Figure{}
}

// RunStorage generates a tree and measures full checkpoint, incremental
// checkpoint and cold restore on the embedded default (SQLite and a local blob
// directory), beside `tar | zstd --fast` and `zstd -d | tar -x` of the same tree.
func RunStorage(ctx context.Context, opts StorageOptions) (*StorageReport, error) {
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.Runs <= 0 {
		opts.Runs = 5
	}
	if opts.Edits <= 0 {
		opts.Edits = 25
	}
	work := opts.WorkDir
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	rep := &StorageReport{Date: time.Now().UTC(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Tree: opts.Tree, Edits: opts.Edits}
	p := opts.Progress

	src := filepath.Join(work, "src")
	os.RemoveAll(src)
	fmt.Fprintf(p, "generating %d files, about %d MiB, in %s\n", opts.Tree.Files, opts.Tree.TotalSize>>20, src)
	st, err := Generate(src, opts.Tree)
	if err != nil {
		return nil, fmt.Errorf("generate tree: %w", err)
	}
	rep.TreeFiles, rep.TreeBytes = st.Files, st.Bytes
	// Read the tree once so every contender starts from a warm page cache.
	if err := shell(fmt.Sprintf("tar -C %q -cf - . > /dev/null", src)); err != nil {
		return nil, err
	}

	// Each contender runs right after its baseline (ABAB…), so a drift in
	// the machine's speed hits both alike. Every run writes a new directory
	// and nothing is deleted until the whole benchmark ends: on this ext4,
	// creating a file skips inode slots freed in the last minutes
	// (recently_deleted), so any deletion would slow whichever runs came
	// next, unevenly.
	archive := filepath.Join(work, "base.tar.zst")
	tarCmd := fmt.Sprintf("tar -C %q -cf - . | zstd --fast -q -f -o %q", src, archive)
	var env *storageEnv
	var envs []*storageEnv
	defer func() {
		for _, e := range envs {
			e.close()
		}
	}()
	tarRuns, fullRuns, err := pairRuns(opts.Runs, p, "baseline tar | zstd --fast", "bothy full checkpoint",
		func(int) error { return shell(tarCmd) },
		func(i int) error {
			var err error
			if env, err = openEnv(ctx, filepath.Join(work, fmt.Sprintf("data%d", i))); err != nil {
				return err
			}
			envs = append(envs, env)
			return nil
		},
		func(int) error { return env.checkpoint(ctx, src) })
	if err != nil {
		return nil, err
	}
	f := newFigure("baseline_tar_zstd", "s", tarRuns)
	f.Command = "tar -C SRC -cf - . | zstd --fast -q -o ARCHIVE"
	rep.Figures = append(rep.Figures, f, newFigure("bothy_full_checkpoint", "s", fullRuns))
	if fi, err := os.Stat(archive); err == nil {
		rep.TarZstSize = fi.Size()
	}
	if rep.StoredSize, err = dirSize(filepath.Join(env.dir, "blobs")); err != nil {
		return nil, err
	}

	// Cold restores: a new repository handle each time, so nothing is cached
	// in memory; the baseline extracts the archive.
	untarRuns, restoreRuns, err := pairRuns(opts.Runs, p, "baseline zstd -d | tar -x", "bothy cold restore",
		func(i int) error {
			d := filepath.Join(work, fmt.Sprintf("untar%d", i))
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			return shell(fmt.Sprintf("zstd -d -q -c %q | tar -C %q -xf -", archive, d))
		},
		nil,
		func(i int) error { return env.restore(ctx, filepath.Join(work, fmt.Sprintf("restore%d", i))) })
	if err != nil {
		return nil, err
	}
	f = newFigure("baseline_untar", "s", untarRuns)
	f.Command = "zstd -d -q -c ARCHIVE | tar -C DST -xf -"
	rep.Figures = append(rep.Figures, f, newFigure("bothy_cold_restore", "s", restoreRuns))
	if err := shell(fmt.Sprintf("diff -r --no-dereference %q %q", src, filepath.Join(work, "restore0"))); err != nil {
		return nil, fmt.Errorf("restored tree differs from the source: %w", err)
	}

	// Incremental checkpoints after a few edits each.
	runs, err := timeRuns(opts.Runs, p, fmt.Sprintf("bothy incremental (%d edits)", opts.Edits),
		func(i int) error { return Touch(src, st, opts.Edits, uint64(i+100)) },
		func(int) error { return env.checkpoint(ctx, src) })
	if err != nil {
		return nil, err
	}
	rep.Figures = append(rep.Figures, newFigure("bothy_incremental_checkpoint", "s", runs))
	rep.Incr = env.last

	return rep, nil
}

// storageEnv is one embedded-default data directory with one computer.
type storageEnv struct {
	dir    string
	store  *sqlite.Store
	blobs  *localblob.Store
	tenant *bothy.Tenant
	comp   *bothy.Computer
	last   checkpoint.Stats
}

func openEnv(ctx context.Context, dir string) (*storageEnv, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	store, err := sqlite.Open(ctx, filepath.Join(dir, "bothy.db"))
	if err != nil {
		return nil, err
	}
	e := &storageEnv{dir: dir, store: store}
	if e.blobs, err = localblob.Open(filepath.Join(dir, "blobs")); err == nil {
		e.tenant, err = bothy.NewTenant("bench", "bench")
	}
	if err == nil {
		err = store.CreateTenant(ctx, e.tenant)
	}
	if err == nil {
		e.comp = &bothy.Computer{ID: "c1", TenantID: e.tenant.ID, Profile: "standard"}
		err = store.CreateComputer(ctx, e.comp)
	}
	if err != nil {
		store.Close()
		return nil, err
	}
	return e, nil
}

func (e *storageEnv) close() { e.store.Close() }

// snapshot opens the computer's current revision with a new repository
// handle, so nothing is cached in memory from an earlier run.
func (e *storageEnv) snapshot(ctx context.Context) (*checkpoint.Snapshot, *bothy.Computer, error) {
	c, err := e.store.FindComputer(ctx, e.tenant.ID, e.comp.ID)
	if err != nil {
		return nil, nil, err
	}
	repo, err := checkpoint.NewRepo(e.blobs, e.tenant.ID, e.tenant.HashKey)
	if err != nil {
		return nil, nil, err
	}
	snap, _, err := repo.OpenRevision(ctx, e.store, c.ID, c.Revision)
	return snap, c, err
}

func (e *storageEnv) checkpoint(ctx context.Context, src string) error {
	parent, c, err := e.snapshot(ctx)
	if err != nil {
		return err
	}
	res, err := parent.Repo().Checkpoint(ctx, src, parent, checkpoint.CheckpointOptions{StatCache: filepath.Join(e.dir, "statcache")})
	if err != nil {
		return err
	}
	e.last = res.Stats
	_, err = e.store.CommitRevision(ctx, res.CommitRequest(c, "bench"))
	return err
}

func (e *storageEnv) restore(ctx context.Context, dst string) error {
	snap, _, err := e.snapshot(ctx)
	if err != nil {
		return err
	}
	return snap.Restore(ctx, dst, checkpoint.RestoreOptions{})
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return err
	})
	return n, err
}
