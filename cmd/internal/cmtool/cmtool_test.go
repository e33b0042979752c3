package cmtool

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrently: every f runs, all at once (each waits for the
// others), and the status is the first nonzero by index, not by time.
func TestConcurrently(t *testing.T) {
	for _, tc := range []struct {
		status []int
		want   int
	}{
		{nil, 0},
		{[]int{0}, 0},
		{[]int{0, 0, 0}, 0},
		{[]int{3}, 3},
		{[]int{0, 5, 0, 7}, 5},
		{[]int{-1, 0, 2}, -1},
	} {
		var ran atomic.Int32
		var all sync.WaitGroup
		all.Add(len(tc.status))
		got := Concurrently(len(tc.status), func(i int) int {
			ran.Add(1)
			all.Done()
			all.Wait() // deadlocks unless every f runs at once
			return tc.status[i]
		})
		if got != tc.want || int(ran.Load()) != len(tc.status) {
			t.Errorf("%v: got %d after %d runs, want %d", tc.status, got, ran.Load(), tc.want)
		}
	}
	// The later index fails first in time; the earlier one still wins.
	first := make(chan struct{})
	got := Concurrently(2, func(i int) int {
		if i == 1 {
			close(first)
			return 9
		}
		<-first
		return 4
	})
	if got != 4 {
		t.Errorf("got %d, want 4 (index order)", got)
	}
}

func TestFirstFailure(t *testing.T) {
	for _, tc := range []struct {
		status []int
		want   int
	}{
		{nil, 0}, {[]int{0, 0}, 0}, {[]int{0, -1, 8}, -1}, {[]int{8, -1}, 8},
	} {
		if got := FirstFailure(tc.status); got != tc.want {
			t.Errorf("%v: got %d, want %d", tc.status, got, tc.want)
		}
	}
}

// TestRunTest: the side runs, then "test complete", destroy and the
// status, which a nonzero one also is as the error.
func TestRunTest(t *testing.T) {
	for _, status := range []int{0, 8} {
		var out strings.Builder
		err := RunTest(context.Background(), &out,
			func(context.Context) int { out.WriteString("side\n"); return status },
			func() { out.WriteString("destroy\n") })
		want := fmt.Sprintf("side\ntest complete\ndestroy\nreturn status %d\n", status)
		if out.String() != want || (err != nil) != (status != 0) {
			t.Errorf("status %d: err %v, output %q, want %q", status, err, out.String(), want)
		}
	}
}
