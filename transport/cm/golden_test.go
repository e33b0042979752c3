package cm

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// The passive side of the captured rping exchange: fed the kernel's REQ,
// RTU and DREQ, the Table answers with the kernel's REP and DREP byte for
// byte, and asks for the QP transitions rdma_cm made.
func TestGoldenPassiveAnswersAsKernel(t *testing.T) {
	caps, _ := rpingMADs(t)
	req, rep := caps[0].msg.(*mad.REQ), caps[1].msg.(*mad.REP)
	clock := transporttest.NewManualClock()
	tb := NewTable(Config{LocalCAGUID: rep.LocalCAGUID, NewID: fixedIDs(rep.LocalCommID)}, clock)
	if _, err := tb.Listen(ServiceID(PortSpaceTCP, 7174), caps[1].from); err != nil {
		t.Fatal(err)
	}
	var out Output
	if err := tb.Receive(caps[0].from, caps[0].b, &out); err != nil {
		t.Fatal(err)
	}
	ev := only(t, &out, EventConnectRequest)
	goldenPassiveRequest(t, ev, req, caps)

	out.Reset()
	if err := tb.Accept(ev.ID, AcceptParams{QPN: rep.LocalQPN, PSN: rep.StartingPSN, RespRes: 1, InitDepth: 1, RNRRetry: 7}, &out); err != nil {
		t.Fatal(err)
	}
	goldenPassiveAccept(t, &out, req, rep, caps)

	out.Reset()
	_ = tb.Receive(caps[2].from, caps[2].b, &out)
	only(t, &out, EventEstablished)
	out.Reset()
	_ = tb.Receive(caps[3].from, caps[3].b, &out)
	only(t, &out, EventDisconnected)
	if len(out.Modify) != 1 || out.Modify[0].State != QPStateErr || len(out.Sends) != 0 {
		t.Errorf("on DREQ: modify %+v, %d sends before the consumer disconnects", out.Modify, len(out.Sends))
	}
	out.Reset()
	if err := tb.Disconnect(ev.ID, nil, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Sends) != 1 || !bytes.Equal(out.Sends[0].MAD[:], caps[4].b) {
		t.Fatalf("DREP differs from the kernel's\n got %x\nwant %x", out.Sends[0].MAD, caps[4].b)
	}
	waitTimewaitExit(t, tb, clock, ev.ID)
}

// goldenPassiveRequest checks the connect request the table makes of the
// kernel's REQ: addresses from the cma_hdr, the peer's QPN and PSN, the
// path seen from the passive side, no private data.
func goldenPassiveRequest(t *testing.T, ev Event, req *mad.REQ, caps []capturedMAD) {
	t.Helper()
	r := ev.Request
	wantSrc := netip.AddrPortFrom(caps[0].from, 58775) // rping's cma_hdr source port, 0xe597
	if r.Src != wantSrc || r.Dst != netip.AddrPortFrom(caps[1].from, 7174) || r.Peer != caps[0].from ||
		r.RemoteQPN != req.LocalQPN || r.RemotePSN != req.StartingPSN || r.PathMTU != 3 || r.QPType != mad.ServiceRC {
		t.Errorf("request %+v", r)
	}
	if AddrFromGID(r.Path.LocalGID) != caps[1].from || AddrFromGID(r.Path.RemoteGID) != caps[0].from {
		t.Errorf("path from the passive side: %v -> %v", r.Path.LocalGID, r.Path.RemoteGID)
	}
	if ev.PrivateData != nil {
		t.Errorf("rping sends no private data after the cma_hdr; got %x", ev.PrivateData)
	}
}

// goldenPassiveAccept checks what Accept puts out: the kernel's REP to the
// byte, and rdma_cm's INIT, RTR, RTS with the attributes the capture shows.
func goldenPassiveAccept(t *testing.T, out *Output, req *mad.REQ, rep *mad.REP, caps []capturedMAD) {
	t.Helper()
	if len(out.Sends) != 1 || !bytes.Equal(out.Sends[0].MAD[:], caps[1].b) || out.Sends[0].To != caps[0].from {
		t.Fatalf("REP differs from the kernel's\n got %x\nwant %x", out.Sends[0].MAD, caps[1].b)
	}
	// cma_accept_ib: INIT (access), RTR, RTS before the REP leaves.
	if len(out.Modify) != 3 || out.Modify[0].State != QPStateInit || out.Modify[1].State != QPStateRTR ||
		out.Modify[2].State != QPStateRTS {
		t.Fatalf("modify %+v", out.Modify)
	}
	a := out.Modify[1].Attr
	// rping offers one RDMA READ: the QP answers reads and atomics.
	if a.AccessFlags != AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic {
		t.Errorf("access flags %#x", a.AccessFlags)
	}
	// The PSNs as the capture's data shows them: the server's first RDMA
	// READ carries the REQ's Starting PSN, the client's first SEND the REP's.
	if psn := rpingDataPSN(t, caps[1].from); a.SQPSN != psn || psn != req.StartingPSN {
		t.Errorf("server sends from PSN %#x, the capture's server from %#x (REQ's %#x)", a.SQPSN, psn, req.StartingPSN)
	}
	if a.DestQPN != req.LocalQPN || a.RQPSN != rep.StartingPSN || a.SQPSN != req.StartingPSN || a.PathMTU != 3 ||
		a.MaxDestRdAtomic != 1 || a.MaxRdAtomic != 1 || a.RetryCount != 7 || a.RNRRetry != 7 ||
		a.Timeout != req.Primary.LocalACKTimeout {
		t.Errorf("QP attributes %+v", a)
	}
}

// The active side: the Table's REQ for rping's parameters is the kernel's
// byte for byte (service ID, cma_hdr, path, flow label, Local ACK Timeout,
// CM timeouts and retries, TID), its RTU and DREQ too.
func TestGoldenActiveSendsAsKernel(t *testing.T) {
	caps, _ := rpingMADs(t)
	req, rep := caps[0].msg.(*mad.REQ), caps[1].msg.(*mad.REP)
	clock := transporttest.NewManualClock()
	tb := NewTable(Config{LocalCAGUID: req.LocalCAGUID, HiTID: uint32(caps[0].h.TransactionID >> 32),
		NewID: fixedIDs(req.LocalCommID)}, clock)
	var out Output
	id, err := tb.Connect(ConnectParams{Src: netip.AddrPortFrom(caps[0].from, 58775), Dst: netip.AddrPortFrom(caps[1].from, 7174),
		QPN: req.LocalQPN, PSN: req.StartingPSN, RespRes: 1, InitDepth: 1, RetryCount: 7, RNRRetry: 7, PathMTU: 3}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Sends) != 1 || !bytes.Equal(out.Sends[0].MAD[:], caps[0].b) || out.Sends[0].To != caps[1].from {
		t.Fatalf("REQ differs from the kernel's\n got %x\nwant %x", out.Sends[0].MAD, caps[0].b)
	}
	out.Reset()
	_ = tb.Receive(caps[1].from, caps[1].b, &out)
	only(t, &out, EventEstablished)
	if len(out.Sends) != 1 || !bytes.Equal(out.Sends[0].MAD[:], caps[2].b) {
		t.Fatalf("RTU differs from the kernel's\n got %x\nwant %x", out.Sends[0].MAD, caps[2].b)
	}
	if len(out.Modify) != 3 || out.Modify[2].State != QPStateRTS {
		t.Fatalf("modify %+v", out.Modify)
	}
	a := out.Modify[2].Attr
	// cm_rep_handler: timeout from the REP's target ACK delay and the life time.
	if psn := rpingDataPSN(t, caps[0].from); a.SQPSN != psn || psn != rep.StartingPSN {
		t.Errorf("client sends from PSN %#x, the capture's client from %#x (REP's %#x)", a.SQPSN, psn, rep.StartingPSN)
	}
	if a.DestQPN != rep.LocalQPN || a.RQPSN != req.StartingPSN || a.SQPSN != rep.StartingPSN ||
		a.Timeout != AckTimeout(rep.TargetACKDelay, 18) || a.Timeout != 19 || a.RNRRetry != rep.RNRRetryCount {
		t.Errorf("QP attributes %+v", a)
	}
	out.Reset()
	if err := tb.Disconnect(id, nil, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Sends) != 1 || !bytes.Equal(out.Sends[0].MAD[:], caps[3].b) {
		t.Fatalf("DREQ differs from the kernel's\n got %x\nwant %x", out.Sends[0].MAD, caps[3].b)
	}
	if len(out.Modify) != 1 || out.Modify[0].State != QPStateErr {
		t.Errorf("rdma_disconnect moves the QP to error first: %+v", out.Modify)
	}
	out.Reset()
	_ = tb.Receive(caps[4].from, caps[4].b, &out)
	only(t, &out, EventDisconnected)
	waitTimewaitExit(t, tb, clock, id)
}

func waitTimewaitExit(t *testing.T, tb *Table, clock *transporttest.ManualClock, id uint32) {
	t.Helper()
	if c, ok := tb.Conn(id); !ok || c.State != StateTimewait {
		t.Fatalf("conn %#x: %v, want TIMEWAIT", id, c.State)
	}
	wake, ok := tb.NextWake()
	if !ok {
		t.Fatal("timewait without a timer")
	}
	var out Output
	tb.OnTimer(wake.Add(-1), &out)
	if len(out.Events) != 0 {
		t.Fatalf("timewait left early: %v", events(&out))
	}
	clock.AdvanceTo(wake)
	tb.OnTimer(wake, &out)
	only(t, &out, EventTimewaitExit)
	if n, _ := tb.Len(); n != 0 {
		t.Errorf("%d connections after timewait", n)
	}
}

// rdma_cm's RoCE path as the capture shows it: the flow label is the port
// hash, and the RC QP then sends from the UDP port that label gives.
func TestGoldenRoCEPathAndFlowLabel(t *testing.T) {
	caps, rcSport := rpingMADs(t)
	req := caps[0].msg.(*mad.REQ)
	cma, err := mad.ParseCMAHeader(req.PrivateData[:])
	if err != nil {
		t.Fatal(err)
	}
	fl := RoCEFlowLabel(cma.SrcPort, mad.ServicePort(req.ServiceID))
	if fl != req.Primary.FlowLabel {
		t.Errorf("flow label %#x, REQ has %#x", fl, req.Primary.FlowLabel)
	}
	if got := FlowLabelUDPSport(fl); got != rcSport {
		t.Errorf("UDP source port %d from flow label %#x, the RC traffic uses %d", got, fl, rcSport)
	}
	p, err := Route{Src: caps[0].from, Dst: caps[1].from, PathMTU: 3, HopLimit: 64, FlowLabel: fl, PacketLifeTime: 18}.Path(15)
	if err != nil || p != req.Primary {
		t.Errorf("synthesised path %+v (%v)\n kernel's %+v", p, err, req.Primary)
	}
	if g := GIDFromAddr(caps[0].from); g != req.Primary.LocalGID || g[10] != 0xff || g[11] != 0xff {
		t.Errorf("GID %v, REQ has %v", g, req.Primary.LocalGID)
	}
	if req.ServiceID != 0x0000000001061C06 || ServiceID(PortSpaceTCP, 7174) != req.ServiceID {
		t.Errorf("service ID %#x", req.ServiceID)
	}
	// The kernel's CM timing fields: CMA_CM_RESPONSE_TIMEOUT and
	// CMA_MAX_CM_RETRIES, as Config defaults.
	cfg := NewTable(Config{}, transporttest.NewManualClock()).Config()
	if req.LocalCMResponseTimeout != cfg.CMResponseTimeout || req.RemoteCMResponseTimeout != cfg.CMResponseTimeout ||
		req.MaxCMRetries != cfg.MaxCMRetries || caps[1].msg.(*mad.REP).TargetACKDelay != cfg.CAAckDelay {
		t.Errorf("REQ timing %d/%d/%d, defaults %+v", req.LocalCMResponseTimeout, req.RemoteCMResponseTimeout, req.MaxCMRetries, cfg)
	}
}
