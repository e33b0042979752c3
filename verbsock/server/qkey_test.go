package server_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/verbs"
	"golang.org/x/sys/unix"
)

// Controlled Q_Keys (high bit set, as QP1's 0x80010000) are refused with
// EPERM to an unprivileged client, as ib_uverbs refuses them without
// CAP_NET_RAW; uid 0 and members of a privileged group may set them.
func TestHostileControlledQKey(t *testing.T) {
	needRoot(t)
	h, _ := nictest.Pair(t, 1500)
	for _, tc := range []struct {
		groups []uint32
		euid   int
		ok     bool
	}{
		{nil, nobody, false},
		{nil, -1, true},             // root
		{[]uint32{0}, nobody, true}, // the test thread's egid is 0
	} {
		s, err := server.New(server.Config{Device: h.Dev, PrivilegedGroups: tc.groups})
		if err != nil {
			t.Fatal(err)
		}
		d, err := sdkAs(t, serveSocket(t, s), tc.euid)
		if err != nil {
			t.Fatal(err)
		}
		pd, cq := pdAndCQ(t, d)
		attr := smallQP(cq)
		attr.Type = verbs.QPTypeUD
		qp, err := pd.CreateQP(attr)
		if err != nil {
			t.Fatal(err)
		}
		init := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey
		err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: 0x80010000}, init)
		switch {
		case tc.ok && err != nil:
			t.Errorf("groups %v euid %d: controlled Q_Key refused: %v", tc.groups, tc.euid, err)
		case !tc.ok && !errors.Is(err, syscall.EPERM):
			t.Errorf("groups %v euid %d: controlled Q_Key: %v, want EPERM", tc.groups, tc.euid, err)
		}
		if !tc.ok {
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: 0x11111111}, init); err != nil {
				t.Errorf("an ordinary Q_Key: %v", err)
			}
			// Later, in RTS, the same refusal.
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState); err != nil {
				t.Fatal(err)
			}
			if err := qp.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, QKey: 0x80000000}, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrQKey); !errors.Is(err, syscall.EPERM) {
				t.Errorf("controlled Q_Key at RTS: %v, want EPERM", err)
			}
		}
		d.Close()
		s.Close()
	}
}

// udQP is a UD QP in RTS with Q_Key qkey, a registered buffer and a
// receive CQ.
type udQP struct {
	qp  *verbs.QP
	mr  *verbs.MR
	pd  *verbs.PD
	rcq *verbs.CQ
	scq *verbs.CQ
}

func newUD(t testing.TB, d *verbs.Device, qkey uint32) *udQP {
	t.Helper()
	u := &udQP{}
	u.pd, u.scq = pdAndCQ(t, d)
	var err error
	if u.rcq, err = d.CreateCQ(16, false); err != nil {
		t.Fatal(err)
	}
	buf, err := u.pd.AllocBuffer(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	if u.mr, err = u.pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if u.qp, err = u.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: u.scq, RecvCQ: u.rcq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		a verbs.QPAttr
		m verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: qkey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 1}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	} {
		if err := u.qp.Modify(&st.a, st.m); err != nil {
			t.Fatalf("UD to %v: %v", st.a.State, err)
		}
	}
	if err := u.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{u.mr.SGE(0, 40+64)}}); err != nil {
		t.Fatal(err)
	}
	return u
}

// The high bit of a UD send WR's remote Q_Key means "the QP's own Q_Key"
// (IBA 10.2.5), so an unprivileged client, whose own Q_Key cannot be a
// controlled one, cannot reach a QP that has one: its datagram carries its
// own Q_Key and is dropped there, while a QP with that ordinary Q_Key
// takes it.
func TestHostileControlledQKeyInSendWR(t *testing.T) {
	needRoot(t)
	h, _ := nictest.Pair(t, 1500)
	s, err := server.New(server.Config{Device: h.Dev})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	path := serveSocket(t, s)
	priv, err := sdkAs(t, path, -1)
	if err != nil {
		t.Fatal(err)
	}
	user, err := sdkAs(t, path, nobody)
	if err != nil {
		t.Fatal(err)
	}
	controlled := newUD(t, priv, 0x80010000)
	ordinary := newUD(t, priv, 0x11111111)
	sender := newUD(t, user, 0x11111111)
	ah, err := sender.pd.CreateAH(verbs.AHAttr{DGID: h.GID(), SGIDIndex: h.GIDIndex(), HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, dst := range []*udQP{controlled, ordinary} {
		if err := sender.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
			RemoteQPN: dst.qp.QPN(), RemoteQKey: 0x80010000, SGL: []verbs.SGE{sender.mr.SGE(0, 16)}}); err != nil {
			t.Fatal(err)
		}
	}
	var wc [2]verbs.WC
	waitUntil(t, "the ordinary QP's receive", func() bool { return ordinary.rcq.Poll(wc[:1]) == 1 })
	if wc[0].Status != verbs.WCSuccess || wc[0].SrcQP != sender.qp.QPN() {
		t.Fatalf("ordinary QP: %+v", wc[0])
	}
	qp, ok := h.Dev.QP(controlled.qp.QPN())
	if !ok {
		t.Fatal("no controlled QP in the device")
	}
	waitUntil(t, "the controlled QP's drop", func() bool { return qp.Counters().Get(transport.RcvdDropped) == 1 })
	if n := controlled.rcq.Poll(wc[:]); n != 0 {
		t.Fatalf("the controlled-Q_Key QP received from an unprivileged client: %+v", wc[0])
	}
}

// Membership of a privileged group counts through supplementary groups too
// (SO_PEERGROUPS): a client of uid and gid 65534 whose supplementary group
// is the socket's group may connect, and may set a controlled Q_Key only
// if that group is privileged.
func TestHostileControlledQKeySupplementaryGroup(t *testing.T) {
	needRoot(t)
	const group = 4242
	h, _ := nictest.Pair(t, 1500)
	for _, privileged := range []bool{false, true} {
		var groups []uint32
		if privileged {
			groups = []uint32{group}
		}
		s, err := server.New(server.Config{Device: h.Dev, PrivilegedGroups: groups})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, "vrnicd.sock")
		l, err := server.Listen(path, group)
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(l)
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := withCreds(t, creds{euid: nobody, egid: nobody, groups: []uint32{group}}, func() error {
			return unix.Connect(fd, &unix.SockaddrUnix{Name: path})
		}); err != nil {
			t.Fatalf("connect as a member of the socket's group: %v", err)
		}
		f := os.NewFile(uintptr(fd), "client")
		fc, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		d, err := verbs.OpenConn(fc.(*net.UnixConn))
		if err != nil {
			t.Fatal(err)
		}
		pd, cq := pdAndCQ(t, d)
		attr := smallQP(cq)
		attr.Type = verbs.QPTypeUD
		qp, err := pd.CreateQP(attr)
		if err != nil {
			t.Fatal(err)
		}
		err = qp.Modify(&verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: 0x80010000},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey)
		if privileged && err != nil || !privileged && !errors.Is(err, syscall.EPERM) {
			t.Errorf("privileged group %v: controlled Q_Key: %v", groups, err)
		}
		d.Close()
		s.Close()
	}
}
