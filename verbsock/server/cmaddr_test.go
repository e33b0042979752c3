package server_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock"
)

// TestCMResolveAddr: cm_resolve_addr answers the device's address and its
// GID index for a peer that answers ARP, given or picked; it refuses what
// rdma_resolve_addr refuses, each with its errno (a source that is not the
// device's EADDRNOTAVAIL, a destination of another family than the source
// or not unicast EINVAL); an address nobody answers for fails EHOSTUNREACH
// within the agent's resolution timeout (20 ms here) whatever timeout the
// client asks; the connection still serves.
func TestCMResolveAddr(t *testing.T) {
	s := newServerCM(t, verbsock.Limits{})
	r := dialRaw(t, s, true)
	local := netip.MustParseAddr("192.0.2.1")
	peer := netip.MustParseAddr("192.0.2.2").As16()
	for _, src := range [][16]byte{{}, local.As16()} {
		var resp verbsock.CMResolveAddrResp
		if err := r.do(verbsock.OpCMResolveAddr, &verbsock.CMResolveAddrReq{Dst: peer, Src: src, TimeoutMS: 1000}, nil, &resp); err != nil {
			t.Fatal(err)
		}
		var g verbsock.QueryGIDResp
		if err := r.do(verbsock.OpQueryGID, &verbsock.QueryGIDReq{Port: 1, Index: resp.SGIDIndex}, nil, &g); err != nil {
			t.Fatal(err)
		}
		if netip.AddrFrom16(resp.Src).Unmap() != local || netip.AddrFrom16(g.GID).Unmap() != local {
			t.Errorf("source %v: resolved from %v, GID %d is %v; want %v", src, netip.AddrFrom16(resp.Src),
				resp.SGIDIndex, netip.AddrFrom16(g.GID), local)
		}
	}
	for _, c := range []struct {
		name  string
		req   verbsock.CMResolveAddrReq
		errno syscall.Errno
	}{
		{"source not the device's", verbsock.CMResolveAddrReq{Dst: peer, Src: peer}, syscall.EADDRNOTAVAIL},
		{"IPv4 source, IPv6 destination", verbsock.CMResolveAddrReq{Dst: netip.MustParseAddr("2001:db8::2").As16(), Src: local.As16()}, syscall.EINVAL},
		{"no destination", verbsock.CMResolveAddrReq{}, syscall.EINVAL},
		{"nobody answers", verbsock.CMResolveAddrReq{Dst: netip.MustParseAddr("192.0.2.99").As16()}, syscall.EHOSTUNREACH},
	} {
		if err := r.do(verbsock.OpCMResolveAddr, &c.req, nil, &verbsock.CMResolveAddrResp{}); !errors.Is(err, c.errno) {
			t.Errorf("%s: %v, want %v", c.name, err, c.errno)
		}
	}
	start := time.Now()
	err := r.do(verbsock.OpCMResolveAddr, &verbsock.CMResolveAddrReq{Dst: netip.MustParseAddr("192.0.2.98").As16(), TimeoutMS: 60000},
		nil, &verbsock.CMResolveAddrResp{})
	if !errors.Is(err, syscall.EHOSTUNREACH) || time.Since(start) > 2*time.Second {
		t.Errorf("nobody answers, 60 s asked: %v after %v, want EHOSTUNREACH within the agent's 20 ms", err, time.Since(start))
	}
	r.alive()
}
