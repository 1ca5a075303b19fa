package egress_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain doubles as the command a namespace test runs inside a sandbox
// network: with BOTHY_EGRESS_HELPER_GET=URL set, the test binary fetches
// URL the way an ordinary program does (proxy from the environment),
// prints the body and exits.
func TestMain(m *testing.M) {
	if u := os.Getenv("BOTHY_EGRESS_HELPER_GET"); u != "" {
		resp, err := http.Get(u)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s", resp.StatusCode, b)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeResolver answers from a map and counts lookups.
type fakeResolver struct {
	mu      sync.Mutex
	names   map[string][]netip.Addr
	lookups int
}

func newResolver(pairs ...string) *fakeResolver {
	r := &fakeResolver{names: map[string][]netip.Addr{}}
	for i := 0; i < len(pairs); i += 2 {
		r.set(pairs[i], pairs[i+1])
	}
	return r
}

func (r *fakeResolver) set(name string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names[name] = nil
	for _, a := range addrs {
		r.names[name] = append(r.names[name], netip.MustParseAddr(a))
	}
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	if a, ok := r.names[host]; ok {
		return append([]netip.Addr(nil), a...), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups
}

// inNetns runs fn on an OS thread that has entered the network namespace
// at path; sockets fn creates stay in that namespace.
func inNetns(path string, fn func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		ns, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and exits with this goroutine.
			errc <- errors.Join(errors.New("cannot return to the host namespace"), err)
			return
		}
		runtime.UnlockOSThread()
		errc <- nil
	}()
	return <-errc
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
