package main

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// gateHandler holds log records back until the daemon has started, so a
// failed start prints its one error line and nothing else (the layers
// below may warn while being torn down), and a good start prints what
// happened on the way in order before the ready line.
type gateHandler struct {
	h  slog.Handler
	st *gateState // shared by every handler derived with WithAttrs/WithGroup
}

type gateState struct {
	open atomic.Bool
	mu   sync.Mutex
	held []heldRecord
}

type heldRecord struct {
	h slog.Handler
	r slog.Record
}

func newGate(h slog.Handler) *gateHandler { return &gateHandler{h: h, st: &gateState{}} }

func (g *gateHandler) Enabled(ctx context.Context, l slog.Level) bool { return g.h.Enabled(ctx, l) }

func (g *gateHandler) Handle(ctx context.Context, r slog.Record) error {
	if !g.st.open.Load() {
		g.st.mu.Lock()
		if !g.st.open.Load() {
			g.st.held = append(g.st.held, heldRecord{g.h, r.Clone()})
			g.st.mu.Unlock()
			return nil
		}
		g.st.mu.Unlock()
	}
	return g.h.Handle(ctx, r)
}

func (g *gateHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &gateHandler{h: g.h.WithAttrs(as), st: g.st}
}

func (g *gateHandler) WithGroup(name string) slog.Handler {
	return &gateHandler{h: g.h.WithGroup(name), st: g.st}
}

// release lets records through from now on; the held ones are written
// first if flush, else dropped.
func (g *gateHandler) release(flush bool) {
	g.st.mu.Lock()
	defer g.st.mu.Unlock()
	if g.st.open.Load() {
		return
	}
	if flush {
		for _, x := range g.st.held {
			_ = x.h.Handle(context.Background(), x.r)
		}
	}
	g.st.held = nil
	g.st.open.Store(true)
}
