package interop_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/interop/rxepeer"
	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/gid"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
)

// localNIC is a nic.Device on a TAP in the test's namespace, bridged with
// the guests: vrnicd's engine in-process, without the daemon.
type localNIC struct {
	dev  *nic.Device
	st   *netstack.Stack
	addr netip.Addr
	gids *gid.Table
}

func newLocalNIC(t *testing.T, n *rxepeer.Netns, addr string, mtu int) *localNIC {
	t.Helper()
	name := fmt.Sprintf("vrt%d", rand.IntN(1<<20))
	var tap *link.TAP
	if err := n.Do(func() (err error) {
		tap, err = link.OpenTAP(link.TAPConfig{Name: name, MTU: mtu})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.IP("link", "set", name, "master", n.Bridge); err != nil {
		t.Fatal(err)
	}
	pfx := netip.MustParsePrefix(addr)
	gids := gid.New(tap.HardwareAddr(), 0)
	dev, err := nic.NewDevice(nic.Config{MAC: tap.HardwareAddr(), LinkMTU: mtu, GIDs: gids})
	if err != nil {
		t.Fatal(err)
	}
	st, err := netstack.New(netstack.Config{Link: tap, Mode: netstack.ModeTAP, Addrs: []netip.Prefix{pfx},
		Deliver: dev.Deliver, OnAddrs: func(a []netip.Addr) { _ = gids.Sync(a) }})
	if err != nil {
		t.Fatal(err)
	}
	dev.Attach(st)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = st.Run(ctx) }()
	t.Cleanup(func() {
		_ = dev.Close()
		cancel()
		<-done
		_ = st.Close()
	})
	return &localNIC{dev: dev, st: st, addr: pfx.Addr(), gids: gids}
}

// TestEngineRCPingpongAgainstKernel: vrnicd's engine is the client of the
// kernel's ibv_rc_pingpong, with rc_pingpong's QP attributes and its TCP
// exchange; every iteration completes on both sides.
func TestEngineRCPingpongAgainstKernel(t *testing.T) {
	n := rxepeer.NewBridgeNetns(t, "192.0.2.1/24")
	vm := rxepeer.Boot(t, rxepeer.Options{Netns: n, IP: "192.0.2.2/24"})
	ln := newLocalNIC(t, n, "192.0.2.10/24", 1500)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for _, size := range []int{1, 4096, 65536} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { enginePingpong(ctx, t, n, vm, ln, size, 20) })
	}
}

func enginePingpong(ctx context.Context, t *testing.T, n *rxepeer.Netns, vm *rxepeer.VM, ln *localNIC, size, iters int) {
	srv := vm.Start(fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -s %d -n %d", vm.GIDIndex(), size, iters))
	defer srv.Kill()
	if err := srv.WaitListen(ctx, rxepeer.PingpongPort); err != nil {
		t.Fatal(err)
	}
	m := ln.dev.Mem()
	pd, err := m.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2*size)
	key, err := m.RegMR(pd, mem.NewSliceBacking(buf), 0, uint64(len(buf)), 0x1000_0000, mem.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	scq, rcq := transport.NewMemCQ(1024, nil), transport.NewMemCQ(1024, nil)
	qp, err := ln.dev.CreateQP(nic.QPConfig{Type: transport.QPTypeRC, PD: pd, SendCQ: scq, RecvCQ: rcq,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: uint32(iters + 1), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	if err := qp.Modify(&transport.QPAttr{State: transport.StateInit, Port: 1},
		transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	recvSGE := transport.SGE{Addr: 0x1000_0000 + uint64(size), Length: uint32(size), LKey: key}
	for i := range iters {
		if err := qp.PostRecv(&transport.RecvWR{ID: uint64(i), SGL: []transport.SGE{recvSGE}}); err != nil {
			t.Fatal(err)
		}
	}
	gidIdx, _ := ln.gids.IndexOf(ln.addr)
	local := rxepeer.PingpongDest{QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: netip.AddrFrom16(ln.addr.As16())}
	var conn net.Conn
	if err := n.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", net.JoinHostPort(vm.IP.Addr().String(), fmt.Sprint(rxepeer.PingpongPort)), 10*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	remote, err := rxepeer.PingpongClient(conn, local, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	av := transport.AddressVector{DGID: remote.GID.As16(), SGIDIndex: uint8(gidIdx), HopLimit: 1, Port: 1}
	if err := qp.Modify(&transport.QPAttr{State: transport.StateRTR, PathMTU: transport.MTU1024, DestQPN: remote.QPN,
		RQPSN: remote.PSN, MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: av},
		transport.AttrState|transport.AttrAV|transport.AttrPathMTU|transport.AttrDestQPN|transport.AttrRQPSN|
			transport.AttrMaxDestRdAtomic|transport.AttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&transport.QPAttr{State: transport.StateRTS, SQPSN: local.PSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		transport.AttrState|transport.AttrSQPSN|transport.AttrTimeout|transport.AttrRetryCnt|transport.AttrRNRRetry|
			transport.AttrMaxQPRdAtomic); err != nil {
		t.Fatal(err)
	}
	wcs := make([]transport.WC, 16)
	for i := range iters {
		if err := qp.PostSend(&transport.SendWR{ID: uint64(i), Opcode: transport.WRSend, Flags: transport.SendSignaled,
			SGL: []transport.SGE{{Addr: 0x1000_0000, Length: uint32(size), LKey: key}}}); err != nil {
			t.Fatal(err)
		}
		for _, cq := range []*transport.MemCQ{scq, rcq} {
			for cq.Len() == 0 {
				if ctx.Err() != nil {
					t.Fatalf("iteration %d: no completion; QP %+v", i, qp.Info())
				}
				time.Sleep(100 * time.Microsecond)
			}
			k := cq.Poll(wcs[:1])
			if k != 1 || wcs[0].Status != transport.WCSuccess {
				t.Fatalf("iteration %d: completion %+v", i, wcs[0])
			}
		}
	}
	out, errOut, code, err := srv.Wait(ctx)
	if err != nil || code != 0 {
		t.Fatalf("kernel ibv_rc_pingpong: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if !strings.Contains(out, fmt.Sprintf("%d iters in", iters)) {
		t.Errorf("kernel ibv_rc_pingpong output:\n%s", out)
	}
	c := qp.Counters()
	t.Logf("kernel: %s", strings.TrimSpace(out))
	t.Logf("vrnicd QP: sent %d, rcvd %d, retransmit_timeouts %d, duplicate_request %d, local_op_replays %d",
		c.Get(transport.SentPkts), c.Get(transport.RcvdPkts), c.Get(transport.RetransmitTimeouts),
		c.Get(transport.DuplicateRequest), c.Get(transport.LocalOpReplays))
}
