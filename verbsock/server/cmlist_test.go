package server_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
)

// list_cm without a connection manager is EOPNOTSUPP; with one, a start
// past the snapshot is an empty last page, and the connection lives on.
func TestListCMBounds(t *testing.T) {
	s, _ := newServer(t, verbsock.Limits{})
	r := dialRaw(t, s, true)
	wantErrno(t, "list_cm", r.do(verbsock.OpListCM, &verbsock.PageReq{}, nil, nil), syscall.EOPNOTSUPP)
	r.alive()

	h, _ := nictest.Pair(t, 1500)
	ag := cmagent.New(h.Dev, cmagent.Config{})
	t.Cleanup(ag.Close)
	s2, err := server.New(server.Config{Device: h.Dev, CM: ag, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	r2 := dialRaw(t, s2, true)
	for _, start := range []uint32{0, 1, 1 << 31, ^uint32(0)} {
		var resp verbsock.ListCMResp
		if err := r2.do(verbsock.OpListCM, &verbsock.PageReq{Start: start}, nil, &resp); err != nil {
			t.Fatalf("start %d: %v", start, err)
		}
		if resp.Count != 0 || resp.Next != 0 {
			t.Errorf("start %d on an empty table: %d entries, next %d", start, resp.Count, resp.Next)
		}
	}
	r2.alive()
}
