package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/verbs"
	"golang.org/x/sys/unix"
)

// e2eChildEnv makes the test binary the client of TestE2E/KilledClient:
// it holds the socket path of daemon A.
const e2eChildEnv = "VRNICD_E2E_CHILD"

// TestE2EChildClient is the client process TestE2E/KilledClient starts
// and kills: an RC QP on daemon A streaming 64 KiB RDMA WRITEs, four in
// flight, to the QP whose number, rkey and address it reads from stdin.
func TestE2EChildClient(t *testing.T) {
	sock := os.Getenv(e2eChildEnv)
	if sock == "" {
		t.Skip("the client process of TestE2E/KilledClient; runs only when that test starts it")
	}
	e := e2eOpen(t, sock, e2eA4, e2eA6).end(verbs.QPTypeRC, nil, 1<<20)
	fmt.Fprintf(os.Stdout, "E2E QP %d\n", e.qp.QPN())
	var qpn, rkey uint32
	var addr uint64
	if _, err := fmt.Fscan(os.Stdin, &qpn, &rkey, &addr); err != nil {
		t.Fatal(err)
	}
	e2eConnectTo(t, e, qpn, verbs.GIDFromAddr(netip.MustParseAddr(e2eB4)), e2eLink{})
	e2eToRTS(t, e, e2eLink{})
	const chunk = 64 << 10
	wc := make([]verbs.WC, 4)
	posted, done := 0, 0
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); { // killed long before
		for ; posted-done < 4; posted++ {
			off := uint64(posted%16) * chunk
			if err := e.qp.PostSend(verbs.SendWR{ID: uint64(posted), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{e.mr.SGE(off, chunk)}, RemoteAddr: addr + off, RKey: rkey}); err != nil {
				t.Fatal(err)
			}
		}
		k := e.scq.Poll(wc)
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("WRITE %+v", w)
			}
			if done++; done == 1 {
				fmt.Fprintln(os.Stdout, "E2E STREAMING")
			}
		}
		if k == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// A client process killed with SIGKILL in the middle of an RDMA WRITE
// stream: within 1 s daemon A has destroyed its objects (vrnicctl qp shows
// no QP of its pid), while another client's transfer through A goes on
// and completes whole. The dead client's peer on B is a responder and, as
// IBA has it, learns nothing until it sends itself: its QP stays in RTS
// with nothing completed; its next request goes unanswered (A drops
// packets for a QP it no longer has), so after its retries the READ
// completes with RETRY_EXC_ERR, the QP goes to ERR and the SEND behind it
// is flushed. The three outcomes are subtests, so that one failing does
// not hide the others.
func e2eKilledClient(t *testing.T, n *e2eNet) {
	k := startKilledClient(t, n)
	k.startOtherTransfer(t)
	devA, _ := n.e2eStat(t, n.sockA)
	k.killed = time.Now()
	if err := k.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Run("objects gone", func(t *testing.T) { k.objectsGone(t, n) })
	t.Run("other transfer", func(t *testing.T) { k.otherTransferCompletes(t) })
	t.Run("peer", func(t *testing.T) { k.peerLearns(t, n, devA) })
}

// killedClient is e2eKilledClient's cast: the client process to be killed
// (streaming to peer on B) and another client of A (other, writing to
// otherPeer on B).
type killedClient struct {
	cmd              *exec.Cmd
	exited           chan struct{}
	pid              int
	peer             *e2eEnd
	other, otherPeer *e2eEnd
	progress         chan int
	result           chan error
	killed           time.Time
}

// The other client's transfer: chunks WRITEs of chunk bytes, one at a time.
const killedChunk, killedChunks = 32 << 10, 32

// startKilledClient connects the other client, starts the client process
// (TestE2EChildClient), connects its peer on B and waits until it streams
// and vrnicctl qp shows its QP.
func startKilledClient(t *testing.T, n *e2eNet) *killedClient {
	cb := e2eOpen(t, n.sockB, e2eB4, e2eB6)
	k := &killedClient{peer: cb.end(verbs.QPTypeRC, nil, 1<<20)}
	k.other = e2eOpen(t, n.sockA, e2eA4, e2eA6).end(verbs.QPTypeRC, nil, 1<<20)
	k.otherPeer = cb.end(verbs.QPTypeRC, nil, 1<<20)
	e2eConnect(t, k.other, k.otherPeer, e2eLink{})

	k.cmd = exec.Command(os.Args[0], "-test.run=^TestE2EChildClient$")
	k.cmd.Env = append(os.Environ(), e2eChildEnv+"="+n.sockA, "GORACE=atexit_sleep_ms=0")
	stdin, err := k.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := k.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	k.cmd.Stderr = &stderr
	if err := k.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k.exited = make(chan struct{})
	go func() { _ = k.cmd.Wait(); close(k.exited) }()
	t.Cleanup(func() {
		_ = k.cmd.Process.Kill() // by PID: ours
		<-k.exited
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	await := func(prefix string) string {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("client process ended before %q; stderr:\n%s", prefix, stderr.String())
				}
				if strings.HasPrefix(l, prefix) {
					return strings.TrimPrefix(l, prefix)
				}
			case <-timeout:
				t.Fatalf("client process: no %q within 15 s; stderr:\n%s", prefix, stderr.String())
			}
		}
	}
	var childQPN uint32
	if _, err := fmt.Sscan(await("E2E QP "), &childQPN); err != nil {
		t.Fatal(err)
	}
	// Short timeout and few retries: the error comes in milliseconds.
	quick := e2eLink{timeout: 10, retry: 2}
	e2eConnectTo(t, k.peer, childQPN, verbs.GIDFromAddr(netip.MustParseAddr(e2eA4)), quick)
	e2eToRTS(t, k.peer, quick)
	fmt.Fprintf(stdin, "%d %d %d\n", k.peer.qp.QPN(), k.peer.mr.RKey(), k.peer.mr.Addr())
	await("E2E STREAMING")

	k.pid = k.cmd.Process.Pid
	var theirs []jsonQPLine
	for _, q := range n.e2eQPs(t, n.sockA) {
		if q.PID == k.pid {
			theirs = append(theirs, q)
		}
	}
	if len(theirs) != 1 || theirs[0].QPN != childQPN || theirs[0].State != "RTS" || theirs[0].DestQPN != k.peer.qp.QPN() {
		t.Fatalf("vrnicctl qp on A before the kill: QPs of pid %d %+v, want QP %#x in RTS", k.pid, theirs, childQPN)
	}
	return k
}

// startOtherTransfer starts the other client's transfer, to run across the
// kill, and waits for its first WRITEs to complete.
func (k *killedClient) startOtherTransfer(t *testing.T) {
	other, otherPeer := k.other, k.otherPeer
	fill(other.buf.Bytes(), 7)
	k.progress = make(chan int, killedChunks)
	k.result = make(chan error, 1)
	go func() {
		defer close(k.progress)
		wc := make([]verbs.WC, 1)
		for i := range killedChunks {
			off := uint64(i * killedChunk)
			if err := other.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{other.mr.SGE(off, killedChunk)}, RemoteAddr: otherPeer.mr.Addr() + off, RKey: otherPeer.mr.RKey()}); err != nil {
				k.result <- err
				return
			}
			deadline := time.Now().Add(10 * time.Second)
			for other.scq.Poll(wc) == 0 {
				if time.Now().After(deadline) {
					k.result <- fmt.Errorf("WRITE %d: no completion", i)
					return
				}
				time.Sleep(50 * time.Microsecond)
			}
			if wc[0].Status != verbs.WCSuccess || wc[0].WRID != uint64(i) {
				k.result <- fmt.Errorf("WRITE %d: %+v", i, wc[0])
				return
			}
			k.progress <- i
		}
		k.result <- nil
	}()
	for range 4 {
		if _, ok := <-k.progress; !ok {
			t.Fatalf("other client's transfer: %v", <-k.result)
		}
	}
}

// objectsGone: the killed client's QPs leave A within 1 s, watched closely
// through the other client's connection (the list vrnicctl qp prints); a
// reply counts at the time it arrived.
func (k *killedClient) objectsGone(t *testing.T, n *e2eNet) {
	var gone time.Duration
	for {
		qs, err := k.other.c.d.ListQPs()
		if err != nil {
			t.Fatal(err)
		}
		left := 0
		for _, q := range qs {
			if q.Owner == k.pid {
				left++
			}
		}
		if left == 0 {
			gone = time.Since(k.killed)
			break
		}
		if time.Since(k.killed) > time.Second {
			t.Fatalf("%d QPs of the killed client (pid %d) still on A 1 s after SIGKILL", left, k.pid)
		}
		time.Sleep(time.Millisecond)
	}
	if gone > time.Second {
		t.Fatalf("the killed client's QPs were gone only %v after SIGKILL", gone)
	}
	for _, q := range n.e2eQPs(t, n.sockA) {
		if q.PID == k.pid {
			t.Fatalf("vrnicctl qp shows QP %+v of the killed client", q)
		}
	}
	<-k.exited
	t.Logf("killed client's objects gone %v after SIGKILL", gone.Round(time.Millisecond))
}

// otherTransferCompletes: the other client's transfer ends whole.
func (k *killedClient) otherTransferCompletes(t *testing.T) {
	for range k.progress {
	}
	if err := <-k.result; err != nil {
		t.Fatalf("other client's transfer: %v", err)
	}
	if !bytes.Equal(k.otherPeer.buf.Bytes()[:killedChunk*killedChunks], k.other.buf.Bytes()[:killedChunk*killedChunks]) {
		t.Fatal("other client's data differs")
	}
}

// peerLearns: the dead client's peer has nothing completed and is still in
// RTS; its READ then ends RETRY_EXC_ERR, the SEND behind it is flushed, and
// A counts the packets it dropped since the kill (devA: its counters then).
func (k *killedClient) peerLearns(t *testing.T, n *e2eNet, devA map[string]uint64) {
	peer := k.peer
	if c := peer.scq.Poll(make([]verbs.WC, 1)); c != 0 {
		t.Fatalf("peer of the killed client has a completion before it sent anything")
	}
	if st := e2eQPState(t, n, n.sockB, peer.qp.QPN()); st != "RTS" {
		t.Fatalf("peer in %s before it sent anything, want RTS", st)
	}
	if err := peer.qp.PostSend(
		verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{peer.mr.SGE(0, 4096)},
			RemoteAddr: 0x1000, RKey: 1},
		verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{peer.mr.SGE(0, 64)}},
	); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, peer.scq); wc.WRID != 1 || wc.Status != verbs.WCRetryExcErr {
		t.Fatalf("peer's READ to the dead QP: %+v, want RETRY_EXC_ERR", wc)
	}
	if wc := poll1(t, peer.scq); wc.WRID != 2 || wc.Status != verbs.WCWRFlushErr {
		t.Fatalf("peer's SEND behind it: %+v, want WR_FLUSH_ERR", wc)
	}
	if st := e2eQPState(t, n, n.sockB, peer.qp.QPN()); st != "ERR" {
		t.Fatalf("peer in %s after the retry error, want ERR", st)
	}
	_, qps := n.e2eStat(t, n.sockB)
	var pq map[string]uint64
	for _, q := range qps {
		if uint32(q["qpn"]) == peer.qp.QPN() {
			pq = q
		}
	}
	if pq == nil || pq["retry_exceeded_err"] != 1 || pq["retransmit_timeouts"] < 2 {
		t.Errorf("peer's counters %v: want retry_exceeded_err 1 and a timeout per retry", pq)
	}
	devA2, _ := n.e2eStat(t, n.sockA)
	if d := devA2["rcvd_dropped"] - devA["rcvd_dropped"]; d < 3 {
		t.Errorf("A dropped %d packets since the kill, want the READ and its 2 retries at least", d)
	}
}

func e2eQPState(t *testing.T, n *e2eNet, sock string, qpn uint32) string {
	t.Helper()
	for _, q := range n.e2eQPs(t, sock) {
		if q.QPN == qpn {
			return q.State
		}
	}
	t.Fatalf("no QP %#x on %s", qpn, sock)
	return ""
}

// A hostile client cannot make the daemon touch memory that is gone:
// memfds without the shrink and grow seals are refused, and a client that
// reopens a registered buffer's memfd (through /proc/self/map_files) cannot
// truncate or grow it while the peer writes into it, nor drop the seals;
// punching a hole (allowed: the size stays) only zeroes pages. The daemon
// serves on, and the transfers land.
func e2eTruncate(t *testing.T, n *e2eNet) {
	a := e2eOpen(t, n.sockA, e2eA4, e2eA6).end(verbs.QPTypeRC, nil, 1<<20)
	b := e2eOpen(t, n.sockB, e2eB4, e2eB6).end(verbs.QPTypeRC, nil, 1<<20)
	e2eConnect(t, a, b, e2eLink{})

	raw := e2eRawDial(t, n.sockB)
	for _, seals := range []int{0, unix.F_SEAL_GROW, unix.F_SEAL_SHRINK} {
		fd, err := unix.MemfdCreate("e2e-unsealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Ftruncate(fd, 1<<16); err != nil {
			t.Fatal(err)
		}
		if seals != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
				t.Fatal(err)
			}
		}
		err = raw.call(verbsock.OpMapMem, &verbsock.MapMemReq{}, []int{fd}, &verbsock.MapMemResp{})
		unix.Close(fd)
		if !errors.Is(err, syscall.EPERM) {
			t.Errorf("map_mem of a memfd with seals %#x: %v, want EPERM", seals, err)
		}
	}

	buf := b.buf.Bytes()
	start := b.buf.Addr()
	fd, err := unix.Open(fmt.Sprintf("/proc/self/map_files/%x-%x", start, start+uint64(len(buf))), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("reopening the buffer's memfd: %v", err)
	}
	defer unix.Close(fd)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL {
		t.Fatalf("buffer seals %#x %v", seals, err)
	}

	// A streams 16 WRITEs of 64 KiB into B's buffer while B's client
	// attacks its own memfd.
	const chunk = 64 << 10
	fill(a.buf.Bytes(), 9)
	for i := range 16 {
		off := uint64(i * chunk)
		if err := a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.mr.SGE(off, chunk)}, RemoteAddr: b.mr.Addr() + off, RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, size := range []int64{0, 4096, int64(len(buf)) - 4096, 2 * int64(len(buf))} {
		if err := unix.Ftruncate(fd, size); !errors.Is(err, syscall.EPERM) {
			t.Errorf("ftruncate of the registered memfd to %d: %v, want EPERM", size, err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); !errors.Is(err, syscall.EPERM) {
		t.Errorf("adding a seal after F_SEAL_SEAL: %v, want EPERM", err)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, int64(len(buf)/2)); err != nil {
		t.Fatalf("punching a hole: %v", err)
	}
	for i := range 16 {
		ok(t, a.scq, uint64(i), verbs.WCRDMAWrite)
	}
	// Once more after the hole: every byte lands.
	if err := a.qp.PostSend(verbs.SendWR{ID: 99, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 1<<20)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	ok(t, a.scq, 99, verbs.WCRDMAWrite)
	if !bytes.Equal(buf, a.buf.Bytes()) {
		t.Fatal("data written after the attack differs")
	}
	raw.alive(t)
	if out := n.ctl(t, "devinfo", "--socket", n.sockB); !strings.HasPrefix(out, "hca_id:\tvrnicB\n") {
		t.Fatalf("devinfo after the attack: %q", out)
	}
	select {
	case <-n.b.done:
		t.Fatalf("daemon B exited: %v\n%s", n.b.err, n.b.log.String())
	default:
	}
	if strings.Contains(n.b.log.String(), "panic") || strings.Contains(n.b.log.String(), "SIGBUS") {
		t.Fatalf("daemon B's log:\n%s", n.b.log.String())
	}
}

// e2eRaw speaks the protocol by hand, as a hostile client would.
type e2eRaw struct {
	c  *verbsock.Conn
	id uint64
}

func e2eRawDial(t *testing.T, sock string) *e2eRaw {
	t.Helper()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	r := &e2eRaw{c: verbsock.NewConn(uc)}
	t.Cleanup(func() { r.c.Close() })
	if err := r.call(verbsock.OpHello, &verbsock.HelloReq{Magic: verbsock.Magic, MinVersion: 1, MaxVersion: 1}, nil,
		&verbsock.HelloResp{}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *e2eRaw) call(op verbsock.Op, req any, fds []int, resp any) error {
	r.id++
	if err := r.c.Write(verbsock.Header{Version: 1, Op: op, ID: r.id}, verbsock.Encode(nil, req), fds, time.Second); err != nil {
		return err
	}
	_ = r.c.UnixConn().SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		h, p, rfds, err := r.c.Read()
		if err != nil {
			return err
		}
		verbsock.CloseFDs(rfds)
		if h.Flags&verbsock.FlagEvent != 0 {
			continue
		}
		if h.ID != r.id {
			return fmt.Errorf("reply %d to request %d", h.ID, r.id)
		}
		if h.Status != 0 {
			return &verbsock.Error{Op: op, Errno: syscall.Errno(h.Status), Msg: string(p)}
		}
		return verbsock.Decode(p, resp)
	}
}

func (r *e2eRaw) alive(t *testing.T) {
	t.Helper()
	var pa verbsock.PortAttr
	if err := r.call(verbsock.OpQueryPort, &verbsock.QueryPortReq{Port: 1}, nil, &pa); err != nil || pa.State != 4 {
		t.Fatalf("daemon not answering: %+v %v", pa, err)
	}
}
