package http

import "sync"

// DefaultBudget is the default of NewServer's budget, in bytes: four
// batches at the default cap.
const DefaultBudget = 4 * DefaultMaxOpsSize

// A Budget bounds the bytes of JSON request bodies that are being read and
// decoded at once. A body takes its Content-Length, or its route's cap if
// its length is unknown, before it is read, and gives it back once
// decoded; a body that finds too few bytes left is refused with 503
// unavailable rather than wait. One Budget may serve several handlers (it
// implements runtime.Budget). It is safe for concurrent use.
type Budget struct {
	mu          sync.Mutex
	limit, used int64
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Acquire takes n bytes, or reports false and takes nothing if fewer than
// n are left.
func (b *Budget) Acquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.limit-b.used {
		return false
	}
	b.used += n
	return true
}

// Release gives back n bytes taken by Acquire.
func (b *Budget) Release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}
