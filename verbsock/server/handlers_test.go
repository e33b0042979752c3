package server

import (
	"errors"
	"runtime"
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
