package tool

import (
	"testing"
	"time"
)

// TestSpinnerBackoff: with Backoff, an empty streak longer than
// BackoffAfter sleeps (each Idle then takes at least napMin, the sleeps
// doubling up to napMax), and Moved starts the streak over; without it,
// Idle never sleeps.
func TestSpinnerBackoff(t *testing.T) {
	var s Spinner
	s.Backoff = true
	for range YieldAfter {
		s.Idle()
	}
	time.Sleep(2 * BackoffAfter)
	t0 := time.Now()
	s.Idle()
	if d := time.Since(t0); d < napMin {
		t.Fatalf("first sleep of a long streak took %v, want at least %v", d, napMin)
	}
	if s.nap != 2*napMin {
		t.Fatalf("next sleep %v, want %v", s.nap, 2*napMin)
	}
	for range 10 {
		s.Idle()
	}
	if s.nap > 2*napMax || s.nap < napMax {
		t.Fatalf("sleep grew to %v, want it held near %v", s.nap, napMax)
	}
	s.Moved()
	if s.empty != 0 || s.nap != 0 {
		t.Fatalf("Moved left empty %d nap %v", s.empty, s.nap)
	}

	var y Spinner // no Backoff: yields only
	for range YieldAfter {
		y.Idle()
	}
	time.Sleep(2 * BackoffAfter)
	y.Idle()
	if y.nap != 0 {
		t.Fatalf("a Spinner without Backoff slept (nap %v)", y.nap)
	}
}
