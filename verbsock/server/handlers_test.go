package server

import (
	"errors"
	"runtime"
	"syscall"
	"testing"

	"github.com/vrnic/vrnicd/verbsock"
)

// TestHandlersCoverSpecs checks the op table against verbsock.Specs: every
// request a client may send has a handler (here or in dispatchCM), and no
// handler waits for an op the decoder never yields.
func TestHandlersCoverSpecs(t *testing.T) {
	noCM := &conn{s: &Server{}} // no connection manager: dispatchCM answers before touching state
	for op := range verbsock.Specs {
		_, cm, _ := noCM.dispatchCM(op, nil)
		if _, ok := handlers[op]; ok == cm {
			t.Errorf("%v: in the handler table %v, served by dispatchCM %v", op, ok, cm)
		}
	}
	for op := range handlers {
		if _, ok := verbsock.Specs[op]; !ok {
			t.Errorf("%v: a handler but no spec", op)
		}
	}
}

// TestHandlersTakeSpecRequest checks that each handler asserts the request
// type DecodeRequest makes for its op: a mismatch would panic the
// connection's goroutine on the first such request. The handler runs on a
// nil conn, so it panics either way; only a type assertion's panic fails.
func TestHandlersTakeSpecRequest(t *testing.T) {
	for op, h := range handlers {
		func() {
			defer func() {
				var te *runtime.TypeAssertionError
				if err, ok := recover().(error); ok && errors.As(err, &te) {
					t.Errorf("%v: %v", op, te)
				}
			}()
			h(nil, verbsock.Specs[op].Req(), nil)
		}()
	}
}

// TestTableRemove checks the one remove every kind shares: ibv_destroy_cq
// and ibv_destroy_srq fail with EBUSY while a QP still uses the object
// (which then stays), an unknown handle is ENOENT, an idle one goes.
func TestTableRemove(t *testing.T) {
	idle := &cqObj{}
	c := &conn{cqs: map[uint32]*cqObj{1: {users: 1}, 2: idle}}
	if _, err := cqTable.remove(c, 1); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("CQ used by a QP: %v, want EBUSY", err)
	}
	if _, err := cqTable.lookup(c, 1); err != nil {
		t.Errorf("busy CQ after a refused destroy: %v", err)
	}
	if o, err := cqTable.remove(c, 2); err != nil || o != idle {
		t.Errorf("idle CQ: %v, %v", o, err)
	}
	if _, err := cqTable.lookup(c, 2); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("destroyed CQ: %v, want ENOENT", err)
	}
	if _, err := cqTable.remove(c, 3); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("unknown CQ: %v, want ENOENT", err)
	}
}
