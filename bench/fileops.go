package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// FileOp is one step of the file-operation script, with the figures the
// best-known peer publishes for it (0: none): its FUSE workspace and plain
// ext4, on a 1-vCPU machine. A diagnostic step is there to explain
// another, and holds no goal.
type FileOp struct {
	Key, Label         string
	PeerMS, PeerExt4MS float64
	Diagnostic         bool
}

// FileOps are the steps of the file-operation script, in order.
var FileOps = []FileOp{
	{"create_1000", "create 1000 files (`echo $i > f$i`)", 560.6, 303.2, false},
	{"stat_1000", "stat 1000 files (`stat f/*`)", 0, 0, false},
	{"stat_1000_numeric", "stat 1000 files, no owner names (`stat -c '%s %Y' f/*`)", 0, 0, true},
	{"rm_1000", "remove 1000 files (`rm -r`)", 0, 0, false},
	{"tree_1000", "10x10x10 `mkdir -p` + `touch`, `find | wc -l`", 0, 0, false},
	{"write_64m", "`dd` write 64 MiB", 230.6, 16.8, false},
	{"copy_64m", "`cp` 64 MiB", 1037.2, 39.8, false},
	{"read_64m", "`cat` read 64 MiB", 437.5, 25.6, false},
	{"git_commit_100", "git init, add and commit 100 files", 459.2, 635.4, false},
	{"git_clone_copy", "`git clone --no-hardlinks` of a local bare repository (2,000 files, 20 MiB)", 0, 0, true},
	{"git_clone", "`git clone` of a local bare repository (2,000 files, 20 MiB)", 0, 0, false},
}

// fileOpsScript times each step with bash's $EPOCHREALTIME and prints
// "KEY START END" per step. It works in its own directory, removed at the
// end (untimed), beside repo.git.
const fileOpsScript = `set -euo pipefail
export HOME=$PWD GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@bothy GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@bothy
d=run-%d; mkdir $d; cd $d
t() { echo "$1 $2 $EPOCHREALTIME"; }
s=$EPOCHREALTIME; mkdir f; for i in $(seq 1000); do echo $i > f/f$i; done; t create_1000 $s
s=$EPOCHREALTIME; stat f/* > /dev/null; t stat_1000 $s
s=$EPOCHREALTIME; stat -c '%%s %%Y' f/* > /dev/null; t stat_1000_numeric $s
s=$EPOCHREALTIME; rm -r f; t rm_1000 $s
s=$EPOCHREALTIME; for a in 0 1 2 3 4 5 6 7 8 9; do for b in 0 1 2 3 4 5 6 7 8 9; do mkdir -p t/$a/$b; touch t/$a/$b/f{0..9}; done; done; n=$(find t -type f | wc -l); [ $n -eq 1000 ]; t tree_1000 $s
s=$EPOCHREALTIME; dd if=/dev/zero of=big bs=1M count=64 status=none; t write_64m $s
s=$EPOCHREALTIME; cp big big2; t copy_64m $s
s=$EPOCHREALTIME; cat big2 > /dev/null; t read_64m $s
s=$EPOCHREALTIME; git init -q g; (cd g; for i in $(seq 100); do echo $i > f$i; done; git add .; git commit -qm init); t git_commit_100 $s
s=$EPOCHREALTIME; git clone -q --no-hardlinks ../repo.git c0; t git_clone_copy $s
s=$EPOCHREALTIME; git clone -q ../repo.git c; t git_clone $s
cd ..; rm -rf $d
`

// fileOps runs the file-operation script in a computer, whose workspace
// holds a bare git repository, and with bash in a directory of the host's
// disk holding the same, alternating; each step is timed inside the
// script, so neither side pays for the API or for starting bash.
func fileOps(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	p := opts.Progress
	if _, err := exec.LookPath("git"); err != nil {
		return errors.New("git is missing; install it or run with --fileops=false")
	}
	work := filepath.Join(opts.WorkDir, "runtime")
	gen, seed, host := filepath.Join(work, "gitsrc"), filepath.Join(work, "gitseed"), filepath.Join(work, "host")
	fmt.Fprintf(p, "  generating a git repository of %d files, %d MiB\n", QuickTree.Files, QuickTree.TotalSize>>20)
	if _, err := Generate(gen, TreeSpec{Files: QuickTree.Files, TotalSize: QuickTree.TotalSize, Seed: 3}); err != nil {
		return err
	}
	git := "git -c user.name=bench -c user.email=bench@bothy -c init.defaultBranch=main"
	if err := shell(fmt.Sprintf("cd %q && %s init -q && %s add -A && %s commit -qm init && mkdir -p %q && %s clone -q --bare %q %q && cp -a %q %q",
		gen, git, git, git, seed, git, gen, filepath.Join(seed, "repo.git"), seed, host)); err != nil {
		return err
	}
	c, err := e.create(ctx, bhttp.CreateComputerRequest{Label: "bench-fileops"})
	if err != nil {
		return err
	}
	if err := e.seed(ctx, c.ID, seed); err != nil {
		return err
	}
	if _, err := e.run(ctx, c.ID, bothy.RunRequest{Argv: []string{"true"}}); err != nil {
		return err
	}
	// The tmpfs baseline: the same repository in a tmpfs of its own.
	tmp := filepath.Join(work, "tmpfs-fileops")
	unmount, err := mountTmpfs(tmp)
	if err != nil {
		rep.skip("file operations on tmpfs", err.Error())
		tmp = ""
	} else {
		defer unmount()
		if err := shell(fmt.Sprintf("cp -a %q/. %q", seed, tmp)); err != nil {
			return err
		}
	}
	hostRuns, tmpRuns, bothyRuns := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	var hostTotal, tmpTotal, bothyTotal []float64
	// onHost runs the script with bash in dir and adds its steps to runs.
	onHost := func(dir, script string, runs map[string][]float64) (float64, error) {
		syscall.Sync()
		var out []byte
		d, err := timed(func() error {
			cmd := exec.Command("bash", "-c", script)
			cmd.Dir = dir
			var err error
			if out, err = cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("file operations in %s: %w: %s", dir, err, out)
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		return d, parseSteps(string(out), runs)
	}
	for i := 0; i < opts.FileOpsRuns; i++ {
		script := fmt.Sprintf(fileOpsScript, i)
		d, err := onHost(host, script, hostRuns)
		if err != nil {
			return err
		}
		hostTotal = append(hostTotal, d)
		if tmp != "" {
			t, err := onHost(tmp, script, tmpRuns)
			if err != nil {
				return err
			}
			tmpTotal = append(tmpTotal, t)
		}
		// A new lease for each run, so the repository is in the lower
		// layer each time, as in a session that finds the workspace of an
		// earlier one.
		cmd, d, err := runOnNewLease(ctx, e, c.ID, script, 5*time.Minute)
		if err != nil {
			return err
		}
		bothyTotal = append(bothyTotal, d)
		text, err := stdout(ctx, e, cmd.ID)
		if err != nil {
			return err
		}
		if err := parseSteps(text, bothyRuns); err != nil {
			return err
		}
		fmt.Fprintf(p, "  %-36s host ext4 %6.0f ms, tmpfs %6.0f ms, bothy %6.0f ms (wall, the bothy one through the API)\n",
			fmt.Sprintf("file operations run %d", i+1), hostTotal[i], at(tmpTotal, i), d)
	}
	for _, op := range FileOps {
		f := newFigure("host_"+op.Key, "ms", hostRuns[op.Key])
		f.Command = "bash on the host's disk: " + op.Label
		rep.add(p, f)
		if tmp != "" {
			f = newFigure("tmpfs_"+op.Key, "ms", tmpRuns[op.Key])
			f.Command = "bash on a tmpfs: " + op.Label
			rep.add(p, f)
		}
		rep.add(p, newFigure("bothy_"+op.Key, "ms", bothyRuns[op.Key]))
	}
	rep.add(p, newFigure("host_fileops_total", "ms", hostTotal))
	if tmp != "" {
		rep.add(p, newFigure("tmpfs_fileops_total", "ms", tmpTotal))
	}
	rep.add(p, newFigure("bothy_fileops_total", "ms", bothyTotal))
	return nil
}

// at returns runs[i], or 0 if there is none.
func at(runs []float64, i int) float64 {
	if i < len(runs) {
		return runs[i]
	}
	return 0
}

// mountTmpfs mounts a new tmpfs on dir, for the baselines the peer shows
// on tmpfs; the function it returns unmounts it.
func mountTmpfs(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=8g,mode=0755"); err != nil {
		return nil, fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return func() { syscall.Unmount(dir, syscall.MNT_DETACH) }, nil
}

// parseSteps adds each "KEY START END" line of out to runs, in ms.
func parseSteps(out string, runs map[string][]float64) error {
	n := 0
	for _, ln := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(ln)
		if len(f) != 3 {
			return fmt.Errorf("file operations: unexpected output line %q", ln)
		}
		a, err1 := parseEpoch(f[1])
		b, err2 := parseEpoch(f[2])
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		runs[f[0]] = append(runs[f[0]], ms(b.Sub(a)))
		n++
	}
	if n != len(FileOps) {
		return fmt.Errorf("file operations: %d steps reported, not %d: %q", n, len(FileOps), out)
	}
	return nil
}

// stdout returns a command's standard output, read from its event stream.
func stdout(ctx context.Context, e *serverEnv, id string) (string, error) {
	s, err := e.client.Events(ctx, id, 0)
	if err != nil {
		return "", err
	}
	defer s.Close()
	var b strings.Builder
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			return b.String(), nil
		} else if err != nil {
			return "", err
		}
		if ev.Kind == bothy.EventStdout {
			b.Write(ev.Data)
		}
	}
}
