package http_test

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bothyhq/bothy"
	"github.com/bothyhq/bothy/computetest"
	bhttp "github.com/bothyhq/bothy/http"
	"github.com/bothyhq/bothy/storetest"
)

// resolveCounting counts ResolveToken calls and signals each on resolved.
type resolveCounting struct {
	bothy.Store
	n        atomic.Int64
	resolved chan struct{}
}

func (s *resolveCounting) ResolveToken(ctx context.Context, secret string) (*bothy.Principal, error) {
	s.n.Add(1)
	select {
	case s.resolved <- struct{}{}:
	default:
	}
	return s.Store.ResolveToken(ctx, secret)
}

// TestCommands_EventsRevoked checks that an open event stream resolves its
// token again while its command runs: it goes on while the token is valid,
// and ends with an unauthorized error event once the token is revoked.
func TestCommands_EventsRevoked(t *testing.T) {
	store, _ := openSQLite(t)
	cs := &resolveCounting{Store: store, resolved: make(chan struct{}, 1)}
	fake := computetest.NewFake(store)
	srv := httptest.NewServer(bhttp.NewServer(cs, nil, bhttp.Options{Compute: fake, TokenRecheck: 10 * time.Millisecond}))
	t.Cleanup(srv.Close)
	ctx := t.Context()
	if err := store.CreateTenant(ctx, &bothy.Tenant{ID: "acme", HashKey: make([]byte, 32)}); err != nil {
		t.Fatal(err)
	}
	tok, secret, err := store.CreateToken(ctx, "acme", "tester", []string{bothy.ScopeComputersRead}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateComputer(ctx, &bothy.Computer{ID: "cmp_rev", TenantID: "acme", Owner: "tester", Profile: "standard", State: bothy.StateCold}); err != nil {
		t.Fatal(err)
	}
	// The fake's command runs until it is finished, which it never is.
	cmd, _, err := fake.RunCommand(ctx, "acme", "cmp_rev", bothy.RunRequest{Argv: []string{"sleep", "infinity"}})
	if err != nil {
		t.Fatal(err)
	}
	c := bhttp.NewClient(srv.URL, secret)
	s, err := c.Events(ctx, cmd.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	next := func() (*bothy.Event, error) {
		t.Helper()
		type result struct {
			ev  *bothy.Event
			err error
		}
		got := make(chan result, 1)
		go func() {
			ev, err := s.Next()
			got <- result{ev, err}
		}()
		select {
		case r := <-got:
			return r.ev, r.err
		case <-time.After(10 * time.Second):
			s.Close()
			t.Fatal("the stream neither sent an event nor ended within 10 s")
			return nil, nil
		}
	}

	// While the token is valid the stream resolves it again and goes on.
	for want := cs.n.Load() + 2; cs.n.Load() < want; {
		select {
		case <-cs.resolved:
		case <-time.After(10 * time.Second):
			t.Fatalf("the open stream resolved its token %d times in all within 10 s; want a recheck", cs.n.Load())
		}
	}
	fake.Emit(t, "acme", cmd.ID, out(bothy.EventStdout, "still here"))
	if ev, err := next(); err != nil || string(ev.Data) != "still here" {
		t.Fatalf("Next with a valid token = %+v, %v", ev, err)
	}

	if err := store.RevokeToken(ctx, "acme", tok.ID); err != nil {
		t.Fatal(err)
	}
	_, err = next()
	storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
	_, err = c.GetCommand(ctx, cmd.ID)
	storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
	_, err = c.Events(ctx, cmd.ID, 0)
	storetest.WantCode(t, err, bothy.EUNAUTHORIZED)
}
