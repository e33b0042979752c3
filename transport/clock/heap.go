package clock

import "time"

// Slot is an element's place in a Heap: its deadline and its index there.
// The element keeps one (a field) and hands it to the Heap through the
// accessor given to NewHeap, so that Set and Remove cost O(log n) without a
// search. The zero Slot is not in any heap.
type Slot struct {
	at  time.Time
	pos int // index in the heap plus one; 0: not in it
}

// At is the slot's deadline, zero when it is not in a heap.
func (s *Slot) At() time.Time { return s.at }

// Queued reports whether the slot is in a heap.
func (s *Slot) Queued() bool { return s.pos != 0 }

// Heap orders elements by deadline, soonest first: a timer queue such as
// the CM table's, with no container/heap boilerplate per user. Equal deadlines leave in the order
// container/heap would give them (the sift steps are its own). It is not
// safe for concurrent use.
type Heap[T any] struct {
	items []T
	slot  func(T) *Slot
}

// NewHeap is an empty heap whose elements keep their Slot where slot says.
func NewHeap[T any](slot func(T) *Slot) Heap[T] { return Heap[T]{slot: slot} }

// Len is the number of queued elements.
func (h *Heap[T]) Len() int { return len(h.items) }

// Set makes at x's deadline, queueing x or moving it; a zero at removes it.
func (h *Heap[T]) Set(x T, at time.Time) {
	if at.IsZero() {
		h.Remove(x)
		return
	}
	s := h.slot(x)
	s.at = at
	if s.pos != 0 {
		h.fix(s.pos - 1)
		return
	}
	h.items = append(h.items, x)
	s.pos = len(h.items)
	h.up(len(h.items) - 1)
}

// Remove takes x out of the heap, if it is there, and clears its deadline.
func (h *Heap[T]) Remove(x T) {
	s := h.slot(x)
	if s.pos == 0 {
		s.at = time.Time{}
		return
	}
	i, n := s.pos-1, len(h.items)-1
	if i != n {
		h.swap(i, n)
		if !h.down(i, n) {
			h.up(i)
		}
	}
	h.drop()
}

// Peek is the element with the soonest deadline and that deadline; false
// when the heap is empty.
func (h *Heap[T]) Peek() (T, time.Time, bool) {
	if len(h.items) == 0 {
		var zero T
		return zero, time.Time{}, false
	}
	return h.items[0], h.slot(h.items[0]).at, true
}

// Due reports whether the soonest deadline is at or before now.
func (h *Heap[T]) Due(now time.Time) bool {
	return len(h.items) > 0 && !h.slot(h.items[0]).at.After(now)
}

// PopDue takes out the element with the soonest deadline if that deadline
// is at or before now, clearing its deadline; false when none is due.
func (h *Heap[T]) PopDue(now time.Time) (T, bool) {
	var zero T
	if !h.Due(now) {
		return zero, false
	}
	x := h.items[0]
	n := len(h.items) - 1
	h.swap(0, n)
	h.down(0, n)
	h.drop()
	return x, true
}

// Item is the i-th element in heap order (0 the soonest): for invariant
// checks in tests.
func (h *Heap[T]) Item(i int) T { return h.items[i] }

// drop removes the last element, which has been swapped there.
func (h *Heap[T]) drop() {
	n := len(h.items) - 1
	s := h.slot(h.items[n])
	s.pos, s.at = 0, time.Time{}
	var zero T
	h.items[n] = zero
	h.items = h.items[:n]
}

func (h *Heap[T]) less(i, j int) bool {
	return h.slot(h.items[i]).at.Before(h.slot(h.items[j]).at)
}

func (h *Heap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.slot(h.items[i]).pos, h.slot(h.items[j]).pos = i+1, j+1
}

// fix restores the order after element i's deadline changed.
func (h *Heap[T]) fix(i int) {
	if !h.down(i, len(h.items)) {
		h.up(i)
	}
}

func (h *Heap[T]) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts element i0 down within the first n; it reports whether it
// moved.
func (h *Heap[T]) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // right child
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
