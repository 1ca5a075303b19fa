package bench

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/bothyhq/bothy"
)

// opCounter counts the provider calls in flight in the bench's agent, by
// operation ("start", "stop", "recover"), and keeps, since its last
// reset, the peak of each and how long each call took. It is the hook
// behind "the peak number of concurrent provider operations": the agent
// calls the provider through countedProvider, so the count is exact, not
// sampled.
type opCounter struct {
	mu   sync.Mutex
	now  map[string]int
	peak map[string]int
	took map[string][]float64 // ms
}

func newOpCounter() *opCounter {
	return &opCounter{now: map[string]int{}, peak: map[string]int{}, took: map[string][]float64{}}
}

// begin records the start of an operation; the function it returns
// records its end.
func (c *opCounter) begin(op string) func() {
	start := time.Now()
	c.mu.Lock()
	c.now[op]++
	c.peak[op] = max(c.peak[op], c.now[op])
	c.mu.Unlock()
	return func() {
		d := ms(time.Since(start))
		c.mu.Lock()
		c.now[op]--
		c.took[op] = append(c.took[op], d)
		c.mu.Unlock()
	}
}

// reset returns the peaks and durations since the last reset and starts
// counting anew; operations in flight stay counted.
func (c *opCounter) reset() (peak map[string]int, took map[string][]float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	peak, took = c.peak, c.took
	c.peak, c.took = map[string]int{}, map[string][]float64{}
	for op, n := range c.now {
		c.peak[op] = n
	}
	return peak, took
}

// countedProvider is a provider whose Start, Stop and Recover are counted.
// Exec is not: the agent never calls it, each lease's supervisor does, in
// its own process.
type countedProvider struct {
	bothy.Provider
	n *opCounter
}

func (p *countedProvider) Start(ctx context.Context, spec bothy.LeaseSpec) (*bothy.SandboxHandle, error) {
	defer p.n.begin("start")()
	return p.Provider.Start(ctx, spec)
}

func (p *countedProvider) Stop(ctx context.Context, h *bothy.SandboxHandle) (*bothy.Residue, error) {
	defer p.n.begin("stop")()
	return p.Provider.Stop(ctx, h)
}

func (p *countedProvider) Recover(ctx context.Context, handle []byte) (*bothy.SandboxHandle, error) {
	defer p.n.begin("recover")()
	return p.Provider.Recover(ctx, handle)
}

// countedOwner keeps the optional WorkspaceOwner of a counted provider,
// which the agent asks for an idmapped workspace.
type countedOwner struct {
	*countedProvider
	wo bothy.WorkspaceOwner
}

func (p countedOwner) WorkspaceUID(ctx context.Context, leaseID string) (int, error) {
	return p.wo.WorkspaceUID(ctx, leaseID)
}

// commandLimiter is the optional method of a provider that limits each
// command apart (bwrap has it), matched by its method alone.
type commandLimiter interface{ LimitsCommands() bool }

// countedOwnerLimiter is a countedOwner that keeps LimitsCommands too.
type countedOwnerLimiter struct {
	countedOwner
	cl commandLimiter
}

func (p countedOwnerLimiter) LimitsCommands() bool { return p.cl.LimitsCommands() }

var (
	_ bothy.Provider       = (*countedProvider)(nil)
	_ bothy.WorkspaceOwner = countedOwner{}
	_ commandLimiter       = countedOwnerLimiter{}
)

// counted wraps p so that n counts its operations. If the wrapper would
// hide an optional method of p from the agent (one that this file does
// not know), it returns p itself and the methods it would hide: the
// bench then runs the agent as `bothy serve` does, and counts nothing.
func counted(p bothy.Provider, n *opCounter) (bothy.Provider, []string) {
	var w bothy.Provider = &countedProvider{Provider: p, n: n}
	if wo, ok := p.(bothy.WorkspaceOwner); ok {
		o := countedOwner{w.(*countedProvider), wo}
		w = o
		if cl, ok := p.(commandLimiter); ok {
			w = countedOwnerLimiter{o, cl}
		}
	}
	if hidden := hiddenMethods(p, w); len(hidden) > 0 {
		return p, hidden
	}
	return w, nil
}

// hiddenMethods lists the exported methods of inner that wrapped lacks:
// an optional interface the wrapper would hide from the agent, so that
// the bench would no longer run the agent as `bothy serve` does.
func hiddenMethods(inner, wrapped bothy.Provider) []string {
	has := map[string]bool{}
	wt := reflect.TypeOf(wrapped)
	for i := range wt.NumMethod() {
		has[wt.Method(i).Name] = true
	}
	var out []string
	it := reflect.TypeOf(inner)
	for i := range it.NumMethod() {
		if m := it.Method(i).Name; !has[m] {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}
