package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bothyhq/bothy"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/testenv"
)

// TestE2E_InheritedDescriptors: descriptors that `bothy serve` inherited
// from whoever started it (here 20, writable, on a host file; 78 on a file
// holding a secret; 251 on a host directory, none close-on-exec) reach
// none of the commands it runs, under any provider: a command has its
// standard input, output and error and its secret files, nothing else,
// cannot read or write through those numbers, and no process on the host
// but serve itself (its supervisors, the sandboxes' holders, runsc) holds
// them.
func TestE2E_InheritedDescriptors(t *testing.T) {
	needSandbox(t)
	host := t.TempDir()
	secretPath, writablePath, dirPath := filepath.Join(host, "secret"), filepath.Join(host, "writable"), filepath.Join(host, "dir")
	const hostSecret = "host-secret-4f1c9a"
	if err := os.WriteFile(secretPath, []byte(hostSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(writablePath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dirPath, 0o700); err != nil {
		t.Fatal(err)
	}
	open := func(path string, flag int) *os.File {
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	inherited := map[int]*os.File{
		20:  open(writablePath, os.O_WRONLY|os.O_APPEND),
		78:  open(secretPath, os.O_RDONLY),
		251: open(dirPath, os.O_RDONLY),
	}

	data := t.TempDir()
	put := bothyCmd(t, "admin", "secret", "put", "--data", data, "--tenant", "default", "gh")
	put.Stdin = strings.NewReader("file-secret\n")
	if out, err := put.CombinedOutput(); err != nil {
		t.Fatalf("admin secret put: %v: %s", err, out)
	}
	profiles := "standard=bwrap,dev=process"
	_, runscErr := exec.LookPath("runsc")
	if runscErr == nil {
		profiles += ",strong=gvisor"
	}
	cmd := bothyCmd(t, "serve", "--data", data, "--listen", "127.0.0.1:0", "--profiles", profiles, "--allow-process")
	// Entry i of ExtraFiles becomes descriptor 3+i; the nil entries are
	// closed in the child.
	cmd.ExtraFiles = make([]*os.File, 251-2)
	for fd, f := range inherited {
		cmd.ExtraFiles[fd-3] = f
	}
	s := startServeCmd(t, cmd)
	a := newAPI(t, s, serverToken(t, s, data))

	// The shell lists its own descriptors (the glob's, closed once read,
	// is gone by the time of the test) and then tries each inherited
	// number.
	const script = `echo "fds:$(for f in /proc/self/fd/*; do [ -L "$f" ] && printf ' %s' "${f##*/}"; done)"
{ cat <&78 && echo "read 78"; } 2>/dev/null
{ echo "written through 20" >&20 && echo "wrote 20"; } 2>/dev/null
{ ls /proc/self/fd/251/ && echo "listed 251"; } 2>/dev/null
case "$GH_FILE" in /dev/fd/*) echo "secret file ${GH_FILE#/dev/fd/}: $(cat "$GH_FILE")";; esac
echo done`
	for _, tc := range []struct {
		profile, provider string
		files             bool // the provider gives secret files
	}{
		{"standard", "bwrap", true},
		{"dev", "process", true},
		{"strong", "gvisor", false},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			if tc.provider == "gvisor" && runscErr != nil {
				testenv.Skip(t, "no runsc program: %v", runscErr)
			}
			if err := os.Truncate(writablePath, 0); err != nil {
				t.Fatal(err)
			}
			c := a.createWith(bhttp.CreateComputerRequest{Label: "fds-" + tc.provider, Profile: tc.profile})
			req := bothy.RunRequest{Script: script, Wait: true}
			if tc.files {
				req.Secrets = []bothy.SecretRef{{Name: "gh", Env: "GH_FILE", File: true}}
			}
			run := a.run(c.ID, req)
			events := a.events(run.ID, 0, nil)
			out := output(events)
			if run.State != bothy.CommandCompleted || !strings.Contains(out, "done") {
				t.Fatalf("command %s, stdout %q, stderr %q", run.State, out, stderr(events))
			}
			want := []int{0, 1, 2}
			if tc.files {
				_, after, ok := strings.Cut(out, "secret file ")
				n, _, _ := strings.Cut(after, ":")
				fd, err := strconv.Atoi(n)
				if !ok || err != nil || !strings.HasPrefix(after, n+": [REDACTED]") {
					t.Errorf("the command did not read its secret file: %q", out)
				}
				want = append(want, fd)
			}
			if got := descriptors(out); !slices.Equal(got, want) {
				t.Errorf("the command's descriptors are %v, want %v; stdout %q, stderr %q", got, want, out, stderr(events))
			}
			for _, leak := range []string{hostSecret, "read 78", "wrote 20", "listed 251"} {
				if strings.Contains(out, leak) {
					t.Errorf("the command printed %q: %q", leak, out)
				}
			}
			if b, _ := os.ReadFile(writablePath); len(b) != 0 {
				t.Errorf("the command wrote the host file through descriptor 20: %q", b)
			}
			checkHeldOnlyBy(t, s.cmd.Process.Pid, secretPath, writablePath, dirPath)
		})
	}
	destroyAll(t, a, data)
	s.stop(t)
}

// descriptors returns the numbers of the line "fds: N N ..." of out, in
// order.
func descriptors(out string) []int {
	var fds []int
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "fds:"); ok {
			for _, f := range strings.Fields(rest) {
				n, err := strconv.Atoi(f)
				if err != nil {
					return nil
				}
				fds = append(fds, n)
			}
		}
	}
	slices.Sort(fds)
	return fds
}

// checkHeldOnlyBy fails if a process other than pid and the test holds a
// descriptor of one of paths. A process with pid's command line is pid
// forked and not yet exec'd: it holds what pid holds until its exec.
func checkHeldOnlyBy(t *testing.T, pid int, paths ...string) {
	t.Helper()
	self, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	var files []os.FileInfo
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fi)
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		if err != nil || n == pid || n == os.Getpid() {
			continue
		}
		if cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline")); string(cmdline) == string(self) {
			continue
		}
		dir := filepath.Join("/proc", p.Name(), "fd")
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			fi, err := os.Stat(filepath.Join(dir, fd.Name()))
			if err != nil {
				continue
			}
			for i, f := range files {
				if os.SameFile(fi, f) {
					cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
					t.Errorf("process %d (%.80q) holds %s as descriptor %s", n, strings.ReplaceAll(string(cmdline), "\x00", " "), paths[i], fd.Name())
				}
			}
		}
	}
}
