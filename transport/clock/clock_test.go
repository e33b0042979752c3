package clock

import (
	"testing"
	"time"
)

func TestManualFiresTimersInDeadlineOrderAtTheirDeadline(t *testing.T) {
	start := time.Unix(1000, 0)
	c := NewManual(start)
	var order []int
	var at []time.Duration
	rec := func(i int) func() {
		return func() { order = append(order, i); at = append(at, c.Now().Sub(start)) }
	}
	c.AfterFunc(30*time.Millisecond, rec(3))
	c.AfterFunc(10*time.Millisecond, rec(1))
	stopped := c.AfterFunc(20*time.Millisecond, rec(2))
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop reports the first stop only")
	}
	// A timer set by a timer, due within the same advance, fires too.
	c.AfterFunc(15*time.Millisecond, func() { c.AfterFunc(5*time.Millisecond, rec(4)) })
	c.Advance(25 * time.Millisecond)
	if len(order) != 2 || order[0] != 1 || order[1] != 4 || at[0] != 10*time.Millisecond || at[1] != 20*time.Millisecond {
		t.Fatalf("fired %v at %v; want [1 4] at [10ms 20ms]", order, at)
	}
	if got := c.Now().Sub(start); got != 25*time.Millisecond {
		t.Fatalf("now %v after Advance(25ms)", got)
	}
	c.AdvanceTo(start) // never backwards
	c.AdvanceTo(start.Add(time.Second))
	if len(order) != 3 || order[2] != 3 {
		t.Fatalf("fired %v; want the 30 ms timer last", order)
	}
}

func TestSystemAfterFunc(t *testing.T) {
	done := make(chan struct{})
	System{}.AfterFunc(time.Millisecond, func() { close(done) })
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("System.AfterFunc never fired")
	}
}
