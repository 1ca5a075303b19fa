package bench

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
)

// The dependency set of the npm scenario: a front-end application's
// dependencies and its build tools, fixed by the lockfile (which names no
// registry: npm resolves each package against its configured one).
var (
	//go:embed testdata/npm/package.json
	npmPackageJSON []byte
	//go:embed testdata/npm/package-lock.json
	npmPackageLock []byte
)

// The peer's published npm figures (36,675 files, 1 vCPU).
const (
	peerNpmFiles     = 36675
	peerNpmSeconds   = 124.7
	peerNpmExt4      = 63.9
	peerNpmTmpfs     = 34.3
	npmScenario      = "npm install"
	npmFillTimeout   = 10 * time.Minute
	npmScriptTimeout = 10 * time.Minute
)

// NpmSet describes the npm scenario's dependency set, as the cache fill
// installed it.
type NpmSet struct {
	Direct     []string `json:"direct"` // the packages package.json names
	Packages   int      `json:"packages"`
	Files      int      `json:"files"` // regular files under node_modules
	Bytes      int64    `json:"bytes"`
	CacheBytes int64    `json:"cache_bytes"`
	FillSecs   float64  `json:"fill_seconds"` // the untimed, online install that filled the cache
}

// npmScript installs the set offline from the cache at %s (a shell
// word), timing npm alone with $EPOCHREALTIME, prints "npm_ci START END
// FILES", and removes node_modules (untimed) so the workspace is as it
// was.
const npmScript = `set -euo pipefail
export HOME=$PWD npm_config_update_notifier=false
s=$EPOCHREALTIME
npm ci --offline --cache %s --no-audit --no-fund --ignore-scripts --logs-max=0 > /dev/null
e=$EPOCHREALTIME
n=$(find node_modules -type f | wc -l)
echo "npm_ci $s $e $n"
rm -rf node_modules
`

// npmInstall times `npm ci --offline` of the fixed dependency set from a
// local npm cache, in a computer, on the host's ext4 and on a tmpfs,
// alternating. The cache is filled once before anything is timed, by an
// online `npm ci` through npm's configured registry; if that fails, the
// scenario is skipped with the reason. Each side has the project and the
// cache on its own file system: the computer has them in its workspace
// (the lower layer of its overlay, as a session finds the workspace of an
// earlier one), the host in a directory of its ext4, and in a tmpfs. On
// the host each run installs in a new directory beside the cache, as
// each lease of the computer writes to a new upper layer: on ext4, files
// created where many were just deleted are slower to create. Install
// scripts are not run (--ignore-scripts), on every side.
func npmInstall(ctx context.Context, e *serverEnv, opts *RuntimeOptions, rep *RuntimeReport, _ string) error {
	p := opts.Progress
	if _, err := exec.LookPath("npm"); err != nil {
		rep.skip(npmScenario, "npm is not installed")
		return nil
	}
	work := filepath.Join(opts.WorkDir, "runtime", "npm")
	os.RemoveAll(work)
	fill, cache, ext4 := filepath.Join(work, "fill"), filepath.Join(work, "cache"), filepath.Join(work, "ext4")
	if err := writeNpmProject(fill); err != nil {
		return err
	}
	fmt.Fprintf(p, "  filling a local npm cache through npm's configured registry (untimed)\n")
	set := &NpmSet{}
	began := time.Now()
	fctx, cancel := context.WithTimeout(ctx, npmFillTimeout)
	cmd := exec.CommandContext(fctx, "npm", "ci", "--cache", cache, "--no-audit", "--no-fund", "--ignore-scripts", "--logs-max=0")
	cmd.Dir = fill
	out, err := cmd.CombinedOutput()
	cancel()
	if err != nil {
		rep.skip(npmScenario, "the npm cache could not be filled: "+npmError(err, out))
		return nil
	}
	set.FillSecs = time.Since(began).Seconds()
	if err := set.describe(fill, cache); err != nil {
		return err
	}
	rep.Npm = set
	fmt.Fprintf(p, "  %d packages, %d files, %.0f MiB in node_modules; cache %.0f MiB, filled in %.0f s\n",
		set.Packages, set.Files, mib(set.Bytes), mib(set.CacheBytes), set.FillSecs)
	if err := os.RemoveAll(fill); err != nil {
		return err
	}
	if err := writeNpmProject(ext4); err != nil {
		return err
	}
	if err := shell(fmt.Sprintf("cp -a %q %q", cache, filepath.Join(ext4, ".npm-cache"))); err != nil {
		return err
	}
	tmp := filepath.Join(work, "tmpfs")
	unmount, err := mountTmpfs(tmp)
	if err != nil {
		rep.skip(npmScenario+" on tmpfs", err.Error())
		tmp = ""
	} else {
		defer unmount()
		if err := shell(fmt.Sprintf("cp -a %q/. %q", ext4, tmp)); err != nil {
			return err
		}
	}
	c, err := e.create(ctx, bhttp.CreateComputerRequest{Label: "bench-npm"})
	if err != nil {
		return err
	}
	if err := e.seed(ctx, c.ID, ext4); err != nil {
		return fmt.Errorf("seed the npm project: %w", err)
	}
	if _, err := e.run(ctx, c.ID, bothy.RunRequest{Argv: []string{"true"}}); err != nil {
		return err
	}
	onHost := func(base string, i int) (float64, error) {
		dir := filepath.Join(base, fmt.Sprintf("run-%d", i))
		if err := writeNpmProject(dir); err != nil {
			return 0, err
		}
		syscall.Sync()
		cmd := exec.CommandContext(ctx, "bash", "-c", fmt.Sprintf(npmScript, shellQuote(filepath.Join(base, ".npm-cache"))))
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("npm ci in %s: %w: %s", dir, err, out)
		}
		return parseNpm(string(out), set.Files, rep)
	}
	var ext4Runs, tmpRuns, bothyRuns, commandRuns []float64
	for i := 0; i < opts.NpmRuns; i++ {
		d, err := onHost(ext4, i)
		if err != nil {
			return err
		}
		ext4Runs = append(ext4Runs, d)
		if tmp != "" {
			if d, err = onHost(tmp, i); err != nil {
				return err
			}
			tmpRuns = append(tmpRuns, d)
		}
		// A new lease for each run, so each finds the project in its
		// lower layer.
		cmd, wall, err := runOnNewLease(ctx, e, c.ID, fmt.Sprintf(npmScript, `"$PWD/.npm-cache"`), npmScriptTimeout)
		if err != nil {
			return err
		}
		text, err := stdout(ctx, e, cmd.ID)
		if err != nil {
			return err
		}
		if d, err = parseNpm(text, set.Files, rep); err != nil {
			return err
		}
		bothyRuns, commandRuns = append(bothyRuns, d), append(commandRuns, wall/1000)
		fmt.Fprintf(p, "  %-36s host ext4 %5.1f s, tmpfs %5.1f s, bothy %5.1f s (the whole command %.1f s)\n",
			fmt.Sprintf("npm ci run %d", i+1), ext4Runs[i], at(tmpRuns, i), d, wall/1000)
	}
	f := newFigure("host_npm_ci", "s", ext4Runs)
	f.Command = "npm ci --offline from a local cache, with bash in a directory of the host's ext4"
	rep.add(p, f)
	if tmp != "" {
		f = newFigure("tmpfs_npm_ci", "s", tmpRuns)
		f.Command = "npm ci --offline from a local cache, with bash in a tmpfs"
		rep.add(p, f)
	}
	rep.add(p, newFigure("bothy_npm_ci", "s", bothyRuns))
	f = newFigure("bothy_npm_ci_command", "s", commandRuns)
	f.Command = "the whole command through the API: npm ci, counting and removing node_modules, the checkpoint after"
	rep.add(p, f)
	return nil
}

// shellQuote quotes s as one word for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeNpmProject writes the set's package.json and lockfile into dir.
func writeNpmProject(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), npmPackageJSON, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "package-lock.json"), npmPackageLock, 0o644)
}

// describe counts what the fill installed in dir and the cache's size.
func (s *NpmSet) describe(dir, cache string) error {
	var pkg struct {
		Deps    map[string]string `json:"dependencies"`
		DevDeps map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal(npmPackageJSON, &pkg); err != nil {
		return fmt.Errorf("read the npm set's package.json: %w", err)
	}
	for name, v := range pkg.Deps {
		s.Direct = append(s.Direct, name+"@"+v)
	}
	for name, v := range pkg.DevDeps {
		s.Direct = append(s.Direct, name+"@"+v)
	}
	slices.Sort(s.Direct)
	var lock struct {
		Packages map[string]json.RawMessage `json:"packages"`
	}
	if err := json.Unmarshal(npmPackageLock, &lock); err != nil {
		return fmt.Errorf("read the npm set's lockfile: %w", err)
	}
	for k := range lock.Packages {
		if strings.HasPrefix(k, "node_modules/") || strings.Contains(k, "/node_modules/") {
			s.Packages++
		}
	}
	err := filepath.WalkDir(filepath.Join(dir, "node_modules"), func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		s.Files++
		s.Bytes += info.Size()
		return nil
	})
	if err != nil {
		return err
	}
	s.CacheBytes, err = dirSize(cache)
	return err
}

// parseNpm reads the "npm_ci START END FILES" line of the script's output
// and returns npm's time in seconds. A count of files other than the
// fill's is noted, not fatal.
func parseNpm(out string, files int, rep *RuntimeReport) (float64, error) {
	for _, ln := range strings.Split(out, "\n") {
		f := strings.Fields(ln)
		if len(f) != 4 || f[0] != "npm_ci" {
			continue
		}
		a, err1 := parseEpoch(f[1])
		b, err2 := parseEpoch(f[2])
		n, err3 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil || err3 != nil {
			break
		}
		if n != files {
			rep.Notes = append(rep.Notes, fmt.Sprintf("An offline npm ci installed %d files, where the cache fill installed %d.", n, files))
		}
		return b.Sub(a).Seconds(), nil
	}
	return 0, fmt.Errorf("npm ci: no timing line in %q", out)
}

// addressRE matches an address: a URL, or a host name.
var addressRE = regexp.MustCompile(`[a-z]+://[^\s"']+|\b(?:[A-Za-z0-9-]+\.)+(?:org|com|net|io|dev|local|internal|lan)\b`)

// npmError is the gist of a failed npm run for the report: its last lines,
// with any address left out, since the registry is npm's configuration,
// not the report's.
func npmError(err error, out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	msg := addressRE.ReplaceAllString(strings.Join(lines, " / "), "<address>")
	if len(msg) > 400 {
		msg = msg[:400] + "…"
	}
	return fmt.Sprintf("%v: %s", err, msg)
}
