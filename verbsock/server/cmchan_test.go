package server_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
)

// newServerCMLimits is newServerCM with rdma_cm limits of its own.
func newServerCMLimits(t *testing.T, l server.CMLimits) *server.Server {
	t.Helper()
	h, _ := nictest.Pair(t, 1500)
	ag := cmagent.New(h.Dev, cmagent.Config{ResolveTimeout: 200 * time.Millisecond})
	t.Cleanup(ag.Close)
	s, err := server.New(server.Config{Device: h.Dev, WriteTimeout: time.Second, CM: ag, CMLimits: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openChannel makes an event channel and returns its handle and the
// client's end.
func openChannel(t *testing.T, r *raw) (uint32, *verbsock.Conn) {
	t.Helper()
	var resp verbsock.CMChannelResp
	fds, err := r.doFDs(verbsock.OpCMChannel, &verbsock.Empty{}, nil, &resp)
	if err != nil {
		t.Fatal(err)
	}
	if len(fds) != 1 || resp.Channel == 0 {
		verbsock.CloseFDs(fds)
		t.Fatalf("cm_channel: handle %d, %d descriptors", resp.Channel, len(fds))
	}
	f := os.NewFile(uintptr(fds[0]), "channel")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := verbsock.NewConn(nc.(*net.UnixConn))
	t.Cleanup(func() { c.Close() })
	return resp.Channel, c
}

// nextEvent reads a CM event from a channel socket within d.
func nextEvent(t *testing.T, c *verbsock.Conn, d time.Duration) (verbsock.CMEventMsg, error) {
	t.Helper()
	_ = c.UnixConn().SetReadDeadline(time.Now().Add(d))
	h, p, fds, err := c.Read()
	verbsock.CloseFDs(fds)
	var m verbsock.CMEventMsg
	if err != nil {
		return m, err
	}
	if h.Op != verbsock.OpCMEvent || h.Flags != verbsock.FlagEvent {
		t.Fatalf("channel carried %+v", h)
	}
	if err := verbsock.Decode(p, &m); err != nil {
		t.Fatal(err)
	}
	return m, nil
}

// TestCMChannels: cm_resolve_addr_async answers at once and its
// ADDR_RESOLVED (the device's address, its GID index) or ADDR_ERROR
// (-ETIMEDOUT when nobody answers ARP) comes on the channel named, with
// the request's context; the client's own socket carries none of it.
// cm_migrate and cm_close_channel name existing objects only, a closed
// channel can no longer be named, and the limits hold.
func TestCMChannels(t *testing.T) {
	s := newServerCMLimits(t, server.CMLimits{MaxChannels: 2, MaxResolving: 1})
	r := dialRaw(t, s, true)
	ch1, c1 := openChannel(t, r)
	ch2, c2 := openChannel(t, r)
	_, err := r.doFDs(verbsock.OpCMChannel, &verbsock.Empty{}, nil, &verbsock.CMChannelResp{})
	wantErrno(t, "a third channel, 2 allowed", err, syscall.EDQUOT)

	peer, nobody := netip.MustParseAddr("192.0.2.2").As16(), netip.MustParseAddr("192.0.2.99").As16()
	start := time.Now()
	if err := r.do(verbsock.OpCMResolveAddrAsync, &verbsock.CMResolveAddrAsyncReq{Context: 11, Channel: ch2, Dst: nobody,
		TimeoutMS: 5000}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("cm_resolve_addr_async of an address nobody answers for replied after %v", d)
	}
	wantErrno(t, "a second resolution, 1 at once allowed", r.do(verbsock.OpCMResolveAddrAsync,
		&verbsock.CMResolveAddrAsyncReq{Context: 12, Channel: ch1, Dst: peer}, nil, nil), syscall.EDQUOT)
	m, err := nextEvent(t, c2, 5*time.Second)
	if err != nil || m.Type != verbsock.CMEventAddrError || m.Status != -int32(syscall.ETIMEDOUT) || m.Context != 11 {
		t.Fatalf("nobody answers: %+v %v, want ADDR_ERROR -ETIMEDOUT, context 11", m, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("ADDR_ERROR after %v, before the agent's 200 ms resolution timeout", d)
	}

	if err := r.do(verbsock.OpCMResolveAddrAsync, &verbsock.CMResolveAddrAsyncReq{Context: 13, Channel: ch1, Dst: peer},
		nil, nil); err != nil {
		t.Fatal(err)
	}
	m, err = nextEvent(t, c1, 5*time.Second)
	local := netip.MustParseAddr("192.0.2.1")
	if err != nil || m.Type != verbsock.CMEventAddrResolved || m.Status != 0 || m.Context != 13 ||
		netip.AddrFrom16(m.Local).Unmap() != local {
		t.Fatalf("resolution of the peer: %+v %v, want ADDR_RESOLVED from %v, context 13", m, err, local)
	}
	var g verbsock.QueryGIDResp
	if err := r.do(verbsock.OpQueryGID, &verbsock.QueryGIDReq{Port: 1, Index: uint32(m.AH.SGIDIndex)}, nil, &g); err != nil ||
		netip.AddrFrom16(g.GID).Unmap() != local {
		t.Errorf("GID index %d is %v (%v), want %v", m.AH.SGIDIndex, netip.AddrFrom16(g.GID), err, local)
	}
	if _, err := nextEvent(t, c2, 100*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the other channel carried an event: %v", err)
	}
	_ = r.c.UnixConn().SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if h, _, fds, err := r.c.Read(); !errors.Is(err, os.ErrDeadlineExceeded) {
		verbsock.CloseFDs(fds)
		t.Errorf("the client's socket carried %+v (%v)", h, err)
	}
	wantErrno(t, "source of another family", r.do(verbsock.OpCMResolveAddrAsync, &verbsock.CMResolveAddrAsyncReq{Channel: ch1,
		Dst: netip.MustParseAddr("2001:db8::2").As16(), Src: local.As16()}, nil, nil), syscall.EINVAL)
	wantErrno(t, "unknown channel", r.do(verbsock.OpCMResolveAddrAsync, &verbsock.CMResolveAddrAsyncReq{Channel: 999,
		Dst: peer}, nil, nil), syscall.ENOENT)

	var l verbsock.CMListenResp
	if err := r.do(verbsock.OpCMListen, &verbsock.CMListenReq{Port: 7470, Channel: ch1}, nil, &l); err != nil {
		t.Fatal(err)
	}
	if err := r.do(verbsock.OpCMMigrate, &verbsock.CMMigrateReq{Handle: l.Listener, Channel: ch2}, nil, nil); err != nil {
		t.Errorf("migrate a listener: %v", err)
	}
	if err := r.do(verbsock.OpCMMigrate, &verbsock.CMMigrateReq{Handle: l.Listener}, nil, nil); err != nil {
		t.Errorf("migrate a listener to the client's socket: %v", err)
	}
	wantErrno(t, "migrate to an unknown channel", r.do(verbsock.OpCMMigrate, &verbsock.CMMigrateReq{Handle: l.Listener,
		Channel: 999}, nil, nil), syscall.ENOENT)
	wantErrno(t, "migrate a channel", r.do(verbsock.OpCMMigrate, &verbsock.CMMigrateReq{Handle: ch1, Channel: ch2}, nil, nil),
		syscall.ENOENT)

	if err := r.do(verbsock.OpCMCloseChannel, &verbsock.HandleReq{Handle: ch1}, nil, nil); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "close it again", r.do(verbsock.OpCMCloseChannel, &verbsock.HandleReq{Handle: ch1}, nil, nil), syscall.ENOENT)
	wantErrno(t, "listen on the closed channel", r.do(verbsock.OpCMListen, &verbsock.CMListenReq{Port: 7471, Channel: ch1},
		nil, &l), syscall.ENOENT)
	if m, err := nextEvent(t, c1, 2*time.Second); err == nil {
		t.Errorf("closed channel carried %+v", m)
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("closed channel: its socket did not end")
	}
	ch3, _ := openChannel(t, r) // room again
	if ch3 == ch1 || ch3 == ch2 {
		t.Errorf("a new channel reuses handle %d", ch3)
	}
	r.alive()
}
