package clock

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"
)

type heapElem struct {
	id   int
	slot Slot
}

// refHeap is container/heap over the same elements, the order Heap keeps.
type refHeap []*refElem

type refElem struct {
	id  int
	at  time.Time
	idx int
}

func (h refHeap) Len() int           { return len(h) }
func (h refHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h refHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *refHeap) Push(x any) { e := x.(*refElem); e.idx = len(*h); *h = append(*h, e) }
func (h *refHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

// TestHeapMatchesContainerHeap runs random Set, Remove and PopDue on a
// Heap and on container/heap side by side: the same element leaves at
// every step (ties included), and every slot says where it is.
func TestHeapMatchesContainerHeap(t *testing.T) {
	const n = 64
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Unix(1000, 0)
	h := NewHeap(func(e *heapElem) *Slot { return &e.slot })
	var ref refHeap
	elems := make([]*heapElem, n)
	refs := make([]*refElem, n)
	for i := range elems {
		elems[i] = &heapElem{id: i}
		refs[i] = &refElem{id: i, idx: -1}
	}
	for step := 0; step < 20000; step++ {
		i := rng.IntN(n)
		switch op := rng.IntN(4); op {
		case 0, 1: // arm or move, few distinct deadlines so ties happen
			at := base.Add(time.Duration(1+rng.IntN(16)) * time.Millisecond)
			h.Set(elems[i], at)
			refs[i].at = at
			if refs[i].idx >= 0 {
				heap.Fix(&ref, refs[i].idx)
			} else {
				heap.Push(&ref, refs[i])
			}
		case 2:
			h.Remove(elems[i])
			if refs[i].idx >= 0 {
				heap.Remove(&ref, refs[i].idx)
			}
			if elems[i].slot.Queued() || !elems[i].slot.At().IsZero() {
				t.Fatalf("step %d: removed element %d still queued at %v", step, i, elems[i].slot.At())
			}
		case 3:
			now := base.Add(time.Duration(rng.IntN(17)) * time.Millisecond)
			wantOK := ref.Len() > 0 && !ref[0].at.After(now)
			if h.Due(now) != wantOK {
				t.Fatalf("step %d: Due(%v) = %v, want %v", step, now, !wantOK, wantOK)
			}
			got, ok := h.PopDue(now)
			if ok != wantOK {
				t.Fatalf("step %d: PopDue(%v) ok=%v, want %v", step, now, ok, wantOK)
			}
			if ok {
				want := heap.Pop(&ref).(*refElem)
				if got.id != want.id {
					t.Fatalf("step %d: PopDue gave %d, container/heap %d", step, got.id, want.id)
				}
				if got.slot.Queued() || !got.slot.At().IsZero() {
					t.Fatalf("step %d: popped element still has a deadline", step)
				}
			}
		}
		if h.Len() != ref.Len() {
			t.Fatalf("step %d: Len %d, want %d", step, h.Len(), ref.Len())
		}
		for k := 0; k < h.Len(); k++ {
			if e := h.Item(k); e.id != ref[k].id || e.slot.pos != k+1 || !e.slot.At().Equal(ref[k].at) {
				t.Fatalf("step %d: position %d holds %d (slot %d, %v), want %d at %v",
					step, k, e.id, e.slot.pos, e.slot.At(), ref[k].id, ref[k].at)
			}
		}
	}
}

// TestHeapPeekAndZero: Peek names the soonest, an empty heap says false,
// and Set with a zero time removes.
func TestHeapPeekAndZero(t *testing.T) {
	h := NewHeap(func(e *heapElem) *Slot { return &e.slot })
	if _, _, ok := h.Peek(); ok {
		t.Fatal("Peek on an empty heap reported an element")
	}
	a, b := &heapElem{id: 1}, &heapElem{id: 2}
	t0 := time.Unix(10, 0)
	h.Set(a, t0.Add(2*time.Second))
	h.Set(b, t0.Add(time.Second))
	if e, at, ok := h.Peek(); !ok || e != b || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("Peek = %v %v %v, want b at t0+1s", e, at, ok)
	}
	h.Set(b, time.Time{})
	if b.slot.Queued() || h.Len() != 1 {
		t.Fatalf("Set(zero) left b queued (len %d)", h.Len())
	}
	if _, ok := h.PopDue(t0.Add(time.Second)); ok {
		t.Fatal("PopDue gave an element before its deadline")
	}
	if e, ok := h.PopDue(t0.Add(2 * time.Second)); !ok || e != a {
		t.Fatal("PopDue at a's deadline did not give a")
	}
}
