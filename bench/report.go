package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// Storage goals from the issue "Durable workspace store".
const (
	goalFullRatio    = 1.3  // full checkpoint / tar | zstd --fast
	goalIncrSeconds  = 0.25 // incremental checkpoint after 25 edits
	goalRestoreRatio = 1.2  // cold restore / zstd -d | tar -x
)

// WriteJSON writes the report as indented JSON.
func (r *StorageReport) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteMarkdown writes the storage section of docs/performance.md.
func (r *StorageReport) WriteMarkdown(w io.Writer, command string) error {
	full, tarz := r.Figure("bothy_full_checkpoint"), r.Figure("baseline_tar_zstd")
	incr := r.Figure("bothy_incremental_checkpoint")
	rest, untar := r.Figure("bothy_cold_restore"), r.Figure("baseline_untar")
	fullRatio, restRatio := ratio(full.Median, tarz.Median), ratio(rest.Median, untar.Median)

	var b strings.Builder
	fmt.Fprintf(&b, "# Performance\n\n")
	fmt.Fprintf(&b, "Figures from `%s`, run on %s (%s, %d CPUs). Each figure is the median of %d runs, with min and max, beside its baseline measured in the same run on the same disk, with a warm page cache for every contender.\n\n",
		command, r.Date.Format("2006-01-02"), r.GoVersion, r.CPUs, len(full.Runs))
	fmt.Fprintf(&b, "## Summary: the workspace store\n\n")
	fmt.Fprintf(&b, "Tree: %d files, %.1f MiB (most files under 4 KiB, a tenth random bytes, the rest text), plus empty directories and symlinks. Embedded default: SQLite and a local blob directory.\n\n", r.TreeFiles, mib(r.TreeBytes))
	fmt.Fprintf(&b, "| scenario | bothy | baseline | ratio | goal | met |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| full checkpoint | %s | %s (`tar \\| zstd --fast`) | %.2fx | ≤ %.1fx | %s |\n", secs(full), secs(tarz), fullRatio, goalFullRatio, yes(fullRatio <= goalFullRatio))
	fmt.Fprintf(&b, "| incremental checkpoint, %d files changed | %s | — | — | ≤ %.2f s | %s |\n", r.Edits, secs(incr), goalIncrSeconds, yes(incr.Median <= goalIncrSeconds))
	fmt.Fprintf(&b, "| cold restore | %s | %s (`zstd -d \\| tar -x`) | %.2fx | ≤ %.1fx | %s |\n\n", secs(rest), secs(untar), restRatio, goalRestoreRatio, yes(restRatio <= goalRestoreRatio))
	fmt.Fprintf(&b, "Stored size after a full checkpoint: %.1f MiB of packs, against %.1f MiB for the `.tar.zst`.\n", mib(r.StoredSize), mib(r.TarZstSize))
	fmt.Fprintf(&b, "The last incremental checkpoint read %d files (%d bytes), wrote %d new chunks (%d bytes), %d new tree objects and %d pack(s) of %d bytes.\n\n",
		r.Incr.FilesRead, r.Incr.BytesRead, r.Incr.NewBlobs, r.Incr.NewBlobBytes, r.Incr.NewTrees, r.Incr.PacksWritten, r.Incr.PackBytes)
	fmt.Fprintf(&b, "## All figures\n\n| figure | median | min | max | runs |\n|---|---|---|---|---|\n")
	for _, f := range r.Figures {
		fmt.Fprintf(&b, "| %s | %.3f %s | %.3f | %.3f | %d |\n", f.Name, f.Median, f.Unit, f.Min, f.Max, len(f.Runs))
	}
	fmt.Fprintf(&b, "\n## How to reproduce\n\n```\n%s\n```\n\nIt generates the tree in a scratch directory (`--work`, default under the system temp dir), runs each contender in turn, prints progress, and rewrites this file and `docs/performance.json`. `--quick` uses a %d-file tree for a smoke run.\n",
		command, QuickTree.Files)
	_, err := io.WriteString(w, b.String())
	return err
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func secs(f Figure) string { return fmt.Sprintf("%.3f s (%.3f–%.3f)", f.Median, f.Min, f.Max) }

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
