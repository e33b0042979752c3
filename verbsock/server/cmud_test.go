package server_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/vrnic/vrnicd/verbsock"
)

// TestCMResolveUDHostile: cm_resolve_ud and cm_accept_ud refuse what a
// client may not ask, each with its errno, and the connection still
// serves; an address nobody answers ARP for fails EHOSTUNREACH after the
// agent's resolution timeout, and a resolution left pending is destroyed
// with its handle.
func TestCMResolveUDHostile(t *testing.T) {
	s := newServerCM(t, verbsock.Limits{})
	r := dialRaw(t, s, true)
	peer := netip.MustParseAddr("192.0.2.2").As16()
	nobody := netip.MustParseAddr("203.0.113.9").As16()
	var resp verbsock.CMConnectResp
	for _, c := range []struct {
		name  string
		op    verbsock.Op
		req   any
		errno syscall.Errno
	}{
		{"TCP port space", verbsock.OpCMResolveUD, &verbsock.CMResolveUDReq{Dst: peer, DstPort: 7174, PortSpace: 0x0106}, syscall.EPROTONOSUPPORT},
		{"private data past its room", verbsock.OpCMResolveUD, &verbsock.CMResolveUDReq{Dst: peer, DstPort: 7174, PrivateLen: 181}, syscall.EINVAL},
		{"port 0", verbsock.OpCMResolveUD, &verbsock.CMResolveUDReq{Dst: peer}, syscall.EADDRNOTAVAIL},
		{"unresolvable", verbsock.OpCMResolveUD, &verbsock.CMResolveUDReq{Dst: nobody, DstPort: 7174}, syscall.EHOSTUNREACH},
		{"no such QP", verbsock.OpCMAcceptUD, &verbsock.CMAcceptUDReq{Conn: 1, QP: 99}, syscall.ENOENT},
	} {
		err := r.do(c.op, c.req, nil, &resp)
		if !errors.Is(err, c.errno) {
			t.Errorf("%s: %v, want %v", c.name, err, c.errno)
		}
	}
	if err := r.do(verbsock.OpCMResolveUD, &verbsock.CMResolveUDReq{Dst: peer, DstPort: 7174, PrivateLen: 180}, nil, &resp); err != nil {
		t.Fatal(err)
	}
	if err := r.do(verbsock.OpCMDestroy, &verbsock.HandleReq{Handle: resp.Conn}, nil, &verbsock.Empty{}); err != nil {
		t.Fatal(err)
	}
	if err := r.do(verbsock.OpCMDestroy, &verbsock.HandleReq{Handle: resp.Conn}, nil, &verbsock.Empty{}); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("second destroy: %v", err)
	}
	r.alive()
}
