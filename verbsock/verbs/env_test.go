package verbs_test

import (
	"context"
	"github.com/vrnic/vrnicd/nic/link/linktest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// env is two devices (nictest hosts on an in-memory pipe) served by
// servertest's daemons, and clients connected to them over socketpairs.
type env struct {
	t    testing.TB
	host *nictest.Host
	peer *nictest.Host
	srv  *server.Server
	psrv *server.Server
}

func newEnv(t testing.TB, limits verbsock.Limits) *env {
	t.Helper()
	ds := servertest.TwoDaemonsLimits(t, 1500, limits)
	return &env{t: t, host: ds[0].Host, peer: ds[1].Host, srv: ds[0].Server, psrv: ds[1].Server}
}

func (e *env) dial(srv *server.Server) *verbs.Device {
	e.t.Helper()
	a, b, err := verbsock.Socketpair()
	if err != nil {
		e.t.Fatal(err)
	}
	go srv.ServeConn(a)
	d, err := verbs.OpenConn(b)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { d.Close() })
	return d
}

func (e *env) client() *verbs.Device     { return e.dial(e.srv) }
func (e *env) peerClient() *verbs.Device { return e.dial(e.psrv) }

// How long the tests wait for a condition (linktest.WaitFor), looking
// every waitPoll: completions come within microseconds.
const waitLimit, waitPoll = 10 * time.Second, 100 * time.Microsecond

// pollN polls cq until n completions have arrived.
func pollN(t testing.TB, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	out := make([]verbs.WC, 0, n)
	buf := make([]verbs.WC, 16)
	linktest.WaitFor(t, "completions", waitLimit, waitPoll, func() bool {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		return len(out) >= n
	})
	return out
}

// vrnicMappings counts this process's mappings of vrnic memfds.
func vrnicMappings(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "memfd:vrnic-")
}

// side is one end of a connection: PD, CQs, a registered buffer and a QP.
type side struct {
	d    *verbs.Device
	pd   *verbs.PD
	scq  *verbs.CQ
	rcq  *verbs.CQ
	buf  *verbs.Buffer
	mr   *verbs.MR
	qp   *verbs.QP
	gidx uint8
	gid  verbs.GID
}

func newSide(t testing.TB, d *verbs.Device, h *nictest.Host, typ verbs.QPType, srq *verbs.SRQ, pd *verbs.PD) *side {
	t.Helper()
	return newSideInit(t, d, h, typ, srq, pd, nil)
}

// newSideInit is newSide with init, if not nil, changing the QP's
// creation attributes.
func newSideInit(t testing.TB, d *verbs.Device, h *nictest.Host, typ verbs.QPType, srq *verbs.SRQ, pd *verbs.PD,
	init func(*verbs.QPInitAttr)) *side {
	t.Helper()
	s := &side{d: d, pd: pd, gidx: h.GIDIndex(), gid: verbs.GID(h.GID())}
	var err error
	if s.pd == nil {
		if s.pd, err = d.AllocPD(); err != nil {
			t.Fatal(err)
		}
	}
	if s.scq, err = d.CreateCQ(256, true); err != nil {
		t.Fatal(err)
	}
	if s.rcq, err = d.CreateCQ(256, true); err != nil {
		t.Fatal(err)
	}
	if s.buf, err = s.pd.AllocBuffer(1 << 20); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|
		verbs.AccessRemoteAtomic|verbs.AccessMWBind); err != nil {
		t.Fatal(err)
	}
	ia := verbs.QPInitAttr{Type: typ, SendCQ: s.scq, RecvCQ: s.rcq, SRQ: srq,
		Cap: verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256}}
	if init != nil {
		init(&ia)
	}
	if s.qp, err = s.pd.CreateQP(ia); err != nil {
		t.Fatal(err)
	}
	return s
}

// connect brings two RC/UC QPs to RTS against each other (both to RTR
// first, as rc_pingpong does).
func connect(t testing.TB, a, b *side) {
	t.Helper()
	connectTimeout(t, a, b, 14)
}

// connectTimeout is connect with the given local ACK timeout.
func connectTimeout(t testing.TB, a, b *side, timeout uint8) {
	t.Helper()
	uc := a.qp.Type() == verbs.QPTypeUC
	acc := verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if uc {
		acc = verbs.AccessRemoteWrite
	}
	modify := func(s *side, a verbs.QPAttr, m verbs.AttrMask) {
		t.Helper()
		if err := s.qp.Modify(&a, m); err != nil {
			t.Fatalf("modify to %v: %v", a.State, err)
		}
	}
	for _, p := range [][2]*side{{a, b}, {b, a}} {
		s, o := p[0], p[1]
		modify(s, verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: acc},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
		rtr := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if !uc {
			rtr |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		}
		modify(s, verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: o.qp.QPN(), RQPSN: 100,
			MaxDestRdAtomic: 16, MinRNRTimer: 1, AV: verbs.AHAttr{DGID: o.gid, SGIDIndex: s.gidx, HopLimit: 64, Port: 1}}, rtr)
	}
	for _, s := range []*side{a, b} {
		rts := verbs.QPAttrState | verbs.QPAttrSQPSN
		if !uc {
			rts |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		modify(s, verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 100, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}, rts)
	}
}

// udReady brings a UD QP to RTS.
func udReady(t testing.TB, s *side, qkey uint32) {
	t.Helper()
	for _, st := range []struct {
		a verbs.QPAttr
		m verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: qkey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	} {
		if err := s.qp.Modify(&st.a, st.m); err != nil {
			t.Fatalf("UD modify to %v: %v", st.a.State, err)
		}
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
