package redact

import (
	"cmp"
	"slices"
)

// matcher is an Aho-Corasick automaton over the patterns. States are
// numbered in breadth-first order. The shallow ones (depth up to
// denseDepth, at most maxDense of them: the first numbers), where a scan
// spends most of its steps, have dense rows of fully resolved
// transitions; the deeper ones keep their trie children in sorted edge
// lists and fall back along fail links. Memory stays proportional to the
// patterns' total length, about 25 bytes per pattern byte (a 64 KiB
// secret, the largest, makes a matcher of about 30 MB in some 50 ms),
// and a step is amortized O(1).
//
// Transitions (dense and next) are tagged: the state number, with
// outFlag set when a pattern ends at that state, so that the scan loop
// needs one load per byte in the common case.
type matcher struct {
	nDense int32
	dense  []int32 // 256 tagged transitions per dense state
	fail   []int32
	depth  []int32 // length of the state's string
	// out is the length of the longest pattern that is a suffix of the
	// state's string, 0 if none.
	out []int32
	// The children of state s are label[first[s]:first[s+1]] (sorted)
	// and next[first[s]:first[s+1]] (tagged).
	first  []int32
	label  []byte
	next   []int32
	maxLen int
}

const (
	outFlag   = 1 << 30
	stateMask = outFlag - 1
	// Bounds of the dense rows, 1 KiB each.
	denseDepth = 1
	maxDense   = 1024
)

func newMatcher(patterns [][]byte) *matcher {
	m := &matcher{}
	size := 1 // states, at most: the root and one per pattern byte
	for _, p := range patterns {
		m.maxLen, size = max(m.maxLen, len(p)), size+len(p)
	}
	m.depth = append(make([]int32, 0, size), 0)
	m.out = append(make([]int32, 0, size), 0)
	m.label = make([]byte, 0, size-1)
	m.next = make([]int32, 0, size-1)
	from := make([]int32, 0, size-1) // each edge's parent
	// Insert the patterns one level at a time, so that states are
	// numbered by depth, and within a level by (parent, byte): the edges
	// then come out grouped by parent, in state order, and sorted by
	// label, as first, label and next want them. Few patterns are active
	// at a level, so a sort per level is cheaper than a map of all edges.
	active := make([]int, 0, len(patterns))
	for i, p := range patterns {
		if len(p) > 0 {
			active = append(active, i)
		}
	}
	at := make([]int32, len(patterns)) // each pattern's state so far
	for d := 0; len(active) > 0; d++ {
		slices.SortFunc(active, func(i, j int) int {
			if c := cmp.Compare(at[i], at[j]); c != 0 {
				return c
			}
			return cmp.Compare(patterns[i][d], patterns[j][d])
		})
		t, prevFrom, prevB := int32(0), int32(-1), byte(0)
		for _, i := range active {
			if f, b := at[i], patterns[i][d]; f != prevFrom || b != prevB {
				t = int32(len(m.depth))
				m.depth = append(m.depth, int32(d+1))
				m.out = append(m.out, 0)
				from = append(from, f)
				m.label = append(m.label, b)
				m.next = append(m.next, t)
				prevFrom, prevB = f, b
			}
			at[i] = t
			if len(patterns[i]) == d+1 {
				m.out[t] = int32(d + 1)
			}
		}
		live := active[:0]
		for _, i := range active {
			if len(patterns[i]) > d+1 {
				live = append(live, i)
			}
		}
		active = live
	}
	n := len(m.depth)
	m.first = make([]int32, n+1)
	for _, f := range from {
		m.first[f+1]++
	}
	for i := 1; i <= n; i++ {
		m.first[i] += m.first[i-1]
	}

	// Fail links in state order, which is breadth-first: a state's fail
	// target is shallower, so it is done before it.
	m.fail = make([]int32, n)
	for u := range int32(n) {
		for i := m.first[u]; i < m.first[u+1]; i++ {
			if v := m.next[i]; u != 0 {
				m.fail[v] = m.sparseStep(m.fail[u], m.label[i])
				m.out[v] = max(m.out[v], m.out[m.fail[v]])
			}
		}
	}
	for i, t := range m.next {
		m.next[i] = m.tag(t)
	}

	// Dense rows: a row starts as its fail target's (filled before it)
	// and is overwritten with its own children.
	for m.nDense < int32(n) && m.nDense < maxDense && m.depth[m.nDense] <= denseDepth {
		m.nDense++
	}
	m.dense = make([]int32, int(m.nDense)*256)
	for u := range m.nDense {
		r := m.dense[int(u)*256 : int(u+1)*256]
		if u != 0 {
			copy(r, m.dense[int(m.fail[u])*256:])
		}
		for i := m.first[u]; i < m.first[u+1]; i++ {
			r[m.label[i]] = m.next[i]
		}
	}
	return m
}

// tag returns state t with outFlag set when a pattern ends there.
func (m *matcher) tag(t int32) int32 {
	if m.out[t] > 0 {
		return t | outFlag
	}
	return t
}

// child returns s's (tagged) trie child by b, or -1.
func (m *matcher) child(s int32, b byte) int32 {
	lo, hi := m.first[s], m.first[s+1]
	if hi-lo <= 8 {
		for i := lo; i < hi; i++ {
			if m.label[i] == b {
				return m.next[i]
			}
		}
		return -1
	}
	for lo < hi {
		mid := int32(uint32(lo+hi) >> 1)
		if m.label[mid] < b {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < m.first[s+1] && m.label[lo] == b {
		return m.next[lo]
	}
	return -1
}

// step is the automaton's tagged transition from s on b.
func (m *matcher) step(s int32, b byte) int32 {
	for s >= m.nDense {
		if t := m.child(s, b); t >= 0 {
			return t
		}
		s = m.fail[s]
	}
	return m.dense[int(s)<<8|int(b)]
}

// sparseStep is the untagged transition without the dense rows, to build
// them.
func (m *matcher) sparseStep(s int32, b byte) int32 {
	for {
		if t := m.child(s, b); t >= 0 {
			return t
		} else if s == 0 {
			return 0
		}
		s = m.fail[s]
	}
}
