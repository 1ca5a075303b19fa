// Package bench measures bothy against baselines measured in the same run and
// writes the figures as a report (docs/performance.md plus JSON).
package bench

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// TreeSpec describes a generated workspace tree.
type TreeSpec struct {
	Files     int   // number of regular files
	TotalSize int64 // approximate total bytes
	Seed      uint64
}

// DefaultTree is the storage benchmark's tree: about 50,000 files and 500 MiB,
// most files under 4 KiB, like a source checkout with its dependencies.
var DefaultTree = TreeSpec{Files: 50000, TotalSize: 500 << 20, Seed: 1}

// QuickTree is a small tree for smoke runs.
var QuickTree = TreeSpec{Files: 2000, TotalSize: 20 << 20, Seed: 1}

// TreeStats is what Generate wrote.
type TreeStats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
	Paths                 []string // regular files, relative
}

// Generate writes a tree under dir. The size mix: 85% of files of 0–4 KiB,
// 14.5% of 4–32 KiB, 0.5% of 32–512 KiB, and four large files that take the
// rest of TotalSize. A tenth of the files are random bytes (incompressible);
// the rest is text-like, drawn from a 64 MiB pool of words picked with a
// Zipf distribution, which compresses about like source code.
func Generate(dir string, spec TreeSpec) (*TreeStats, error) {
	rng := rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15))
	pool := textPool(rng, 64<<20)
	sizes := make([]int64, spec.Files)
	var total int64
	for i := range sizes {
		switch p := rng.IntN(1000); {
		case p < 850:
			sizes[i] = rng.Int64N(4 << 10)
		case p < 995:
			sizes[i] = 4<<10 + rng.Int64N(28<<10)
		default:
			sizes[i] = 32<<10 + rng.Int64N(480<<10)
		}
		total += sizes[i]
	}
	// Four large files (think a database, an archive, two binaries) take
	// what is left of the budget.
	if rest := spec.TotalSize - total; rest > 0 && spec.Files >= 8 {
		for i := 0; i < 4; i++ {
			sizes[i*(spec.Files/4)] += rest / 4
		}
	}

	st := &TreeStats{}
	buf := make([]byte, 1<<20)
	for i, size := range sizes {
		// Directories three deep, a dozen or so entries each, like a package tree.
		rel := filepath.Join(fmt.Sprintf("pkg%03d", i/1000), fmt.Sprintf("mod%02d", (i/40)%25), fmt.Sprintf("f%05d.txt", i))
		if i%97 == 0 {
			rel = filepath.Join(fmt.Sprintf("pkg%03d", i/1000), fmt.Sprintf("bin%05d", i))
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		mode := os.FileMode(0o644)
		if i%97 == 0 {
			mode = 0o755
		}
		random := rng.IntN(10) == 0
		if err := writeFile(p, mode, size, rng, pool, buf, random); err != nil {
			return nil, err
		}
		st.Files++
		st.Bytes += size
		st.Paths = append(st.Paths, rel)
	}
	for i := 0; i < spec.Files/500+1; i++ {
		d := filepath.Join(dir, fmt.Sprintf("pkg%03d", i%(spec.Files/1000+1)), fmt.Sprintf("empty%03d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		st.Dirs++
		link := filepath.Join(dir, fmt.Sprintf("pkg%03d", i%(spec.Files/1000+1)), fmt.Sprintf("link%03d", i))
		target := st.Paths[rng.IntN(len(st.Paths))]
		if i%3 == 0 {
			target = "missing/target" // dangling
		}
		if err := os.Symlink(target, link); err != nil {
			return nil, err
		}
		st.Symlinks++
	}
	return st, nil
}

func writeFile(p string, mode os.FileMode, size int64, rng *rand.Rand, pool, buf []byte, random bool) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		if random {
			for i := int64(0); i < n; i += 8 {
				v := rng.Uint64()
				for j := int64(0); j < 8 && i+j < n; j++ {
					buf[i+j] = byte(v >> (8 * j))
				}
			}
			_, err = w.Write(buf[:n])
		} else {
			off := rng.Int64N(int64(len(pool)) - n)
			_, err = w.Write(pool[off : off+n])
		}
		if err != nil {
			f.Close()
			return err
		}
		left -= n
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// textPool returns n bytes of word-like text from a vocabulary of 4,096 words.
func textPool(rng *rand.Rand, n int) []byte {
	words := make([][]byte, 4096)
	for i := range words {
		w := make([]byte, 2+rng.IntN(9))
		for j := range w {
			w[j] = byte('a' + rng.IntN(26))
		}
		words[i] = w
	}
	zipf := rand.NewZipf(rng, 1.1, 4, uint64(len(words)-1))
	out := make([]byte, 0, n+16)
	for len(out) < n {
		out = append(out, words[zipf.Uint64()]...)
		switch rng.IntN(12) {
		case 0:
			out = append(out, '\n')
		case 1:
			out = append(out, '(', ')', ';', '\n', '\t')
		default:
			out = append(out, ' ')
		}
	}
	return out[:n]
}

// Touch rewrites n of the tree's files with new content (incremental edits).
func Touch(dir string, st *TreeStats, n int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := 0; i < n; i++ {
		rel := st.Paths[rng.IntN(len(st.Paths))]
		f, err := os.OpenFile(filepath.Join(dir, rel), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "edit %d %d\n", seed, i)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
