package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
	"io"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// durState is the duration mode's clock (catch_alarm): warm up for the
// margin, sample for duration - 2·margin, cool down for the margin.
type durState int

const (
	startState durState = iota
	sampleState
	stopSampleState
	endState
)

type durClock struct {
	on               bool
	state            durState
	next             time.Time
	duration, margin time.Duration
	t0, t1           time.Time // sample window
}

func newDurClock(p *params) *durClock {
	return &durClock{on: p.isDuration, duration: time.Duration(p.duration) * time.Second, margin: time.Duration(p.margin) * time.Second}
}

// start begins the clock (at the first post, or the first receive).
func (c *durClock) start(now time.Time) {
	if !c.on {
		return
	}
	c.state = startState
	c.next = now.Add(c.margin)
	if c.margin <= 0 {
		c.tick(now)
	}
}

// tick advances the state as time passes.
func (c *durClock) tick(now time.Time) {
	for c.on && c.state != endState && !now.Before(c.next) {
		switch c.state {
		case startState:
			c.state, c.t0, c.next = sampleState, now, now.Add(c.duration-2*c.margin)
		case sampleState:
			c.state, c.t1, c.next = stopSampleState, now, now.Add(c.margin)
		case stopSampleState:
			c.state = endState
		}
	}
}

// window is the sample window's start and end, in ns since base.
func (c *durClock) window(base time.Time) (t0, t1 int64) {
	return int64(c.t0.Sub(base)), int64(c.t1.Sub(base))
}

func (c *durClock) sampling() bool { return c.on && c.state == sampleState }
func (c *durClock) ended() bool    { return c.on && c.state == endState }

// idler paces the busy polls: it yields, honours the context and gives up
// when nothing has moved for stallTimeout.
type idler struct {
	ctx  context.Context
	last time.Time
	what func() string
	spin tool.Spinner
}

func newIdler(ctx context.Context, what func() string) *idler {
	return &idler{ctx: ctx, last: time.Now(), what: what}
}

func (w *idler) moved() { w.last = time.Now(); w.spin.Moved() }

func (w *idler) idle() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if time.Since(w.last) > stallTimeout {
		return fmt.Errorf("no progress for %v: %s (is the peer gone?)", stallTimeout, w.what())
	}
	w.spin.Idle()
	return nil
}

// await waits for cq to move: on its completion channel with -e (events),
// else by yielding between busy polls.
func (w *idler) await(cq *verbs.CQ, events bool) error {
	if events {
		return w.wait(cq)
	}
	return w.idle()
}

// wait sleeps on cq's completion channel (ctx_notify_events) and re-arms it.
func (w *idler) wait(cq *verbs.CQ) error {
	ctx, cancel := context.WithTimeout(w.ctx, stallTimeout)
	defer cancel()
	if err := cq.WaitEvent(ctx); err != nil {
		if w.ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no completion event for %v: %s (is the peer gone?)", stallTimeout, w.what())
		}
		return fmt.Errorf("Failed to get cq_event: %w", err)
	}
	return cq.ReqNotify(false)
}

// progress prints a line on stderr every few seconds of a long run, so
// that a run of minutes is seen to move (perftest prints nothing).
type progress struct {
	w     io.Writer
	quiet bool
	what  string
	total uint64
	begin time.Time
	last  time.Time
}

var progressEvery = 2 * time.Second

func newProgress(w io.Writer, p *params) *progress { return &progress{w: w, quiet: p.quiet} }

func (g *progress) start(what string, total uint64) {
	g.what, g.total, g.begin, g.last = what, total, time.Now(), time.Now()
}

// update reports done of the total (0 in a duration run: no total).
func (g *progress) update(done, total uint64) {
	if g.quiet || time.Since(g.last) < progressEvery {
		return
	}
	if total > 0 {
		done = min(done, total)
	}
	g.last = time.Now()
	if g.total == 0 {
		fmt.Fprintf(g.w, "vrnic-perf: %d %s after %.0f s\n", done, g.what, time.Since(g.begin).Seconds())
		return
	}
	fmt.Fprintf(g.w, "vrnic-perf: %d of %d %s (%.0f%%) after %.0f s\n", done, g.total, g.what,
		100*float64(done)/float64(g.total), time.Since(g.begin).Seconds())
}

// epoch is the origin of a run's timestamps, a second back so that none is
// zero (perftest's cycle counts never are; a zero completion time stands
// for "not recorded" in the peak computation).
func epoch() time.Time { return time.Now().Add(-time.Second) }
