package server_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"github.com/vrnic/vrnicd/verbsock/server"
	"github.com/vrnic/vrnicd/verbsock/shm"
	"golang.org/x/sys/unix"
)

// FuzzServerRequests sends a sequence of arbitrary requests (well-framed,
// so they reach the handlers, with arbitrary payloads and sometimes a
// memfd) on one connection, then checks the server still answers. The
// server must never panic, hang, or leak what the connection made.
func FuzzServerRequests(f *testing.F) {
	s := newServerCM(f, verbsock.Limits{MaxMemBytes: 1 << 22})
	cq := verbsock.Encode(nil, &verbsock.CreateCQReq{CQE: 4})
	f.Add(uint16(verbsock.OpAllocPD), []byte{}, uint8(0), uint16(verbsock.OpDeallocPD), []byte{1, 0, 0, 0}, uint8(0))
	f.Add(uint16(verbsock.OpCreateCQ), cq, uint8(1), uint16(verbsock.OpResizeCQ), []byte{1, 0, 0, 0, 8, 0, 0, 0}, uint8(1))
	srq := verbsock.Encode(nil, &verbsock.CreateSRQReq{PD: 1, MaxWR: 4, MaxSGE: 1})
	f.Add(uint16(verbsock.OpCreateSRQ), srq, uint8(1), uint16(verbsock.OpResizeSRQ), []byte{2, 0, 0, 0, 8, 0, 0, 0}, uint8(1))
	f.Add(uint16(verbsock.OpMapMem), []byte{0, 0, 0, 0}, uint8(1), uint16(verbsock.OpRegMR),
		verbsock.Encode(nil, &verbsock.RegMRReq{PD: 2, Mem: 1, Length: 4096, Access: 7}), uint8(0))
	// reg_mr_segs over the page just mapped (handle 2, after the PD), twice:
	// a page-list MR.
	segs := &verbsock.RegMRSegsReq{PD: 1, Access: 7, Length: uint64(2 * shm.PageSize), NumSegs: 2}
	segs.Segs[0] = verbsock.RegMRSeg{Mem: 2, Pages: 1}
	segs.Segs[1] = verbsock.RegMRSeg{Mem: 2, Pages: 1}
	f.Add(uint16(verbsock.OpMapMem), []byte{0, 0, 0, 0}, uint8(1), uint16(verbsock.OpRegMRSegs), verbsock.Encode(nil, segs), uint8(0))
	// rdma_cm: a listener of each port space, a UD resolution of the peer
	// (whose daemon has no CM: it goes unanswered), answers to handles that
	// are not SIDR requests.
	f.Add(uint16(verbsock.OpCMListen), verbsock.Encode(nil, &verbsock.CMListenReq{PortSpace: verbsock.PortSpaceUDP, Port: 7174}), uint8(0),
		uint16(verbsock.OpCMAcceptUD), verbsock.Encode(nil, &verbsock.CMAcceptUDReq{Conn: 1, QP: 1, PrivateLen: 200}), uint8(0))
	peer := [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 2}
	f.Add(uint16(verbsock.OpCMResolveUD), verbsock.Encode(nil, &verbsock.CMResolveUDReq{Dst: peer, DstPort: 7174, PrivateLen: 4}), uint8(0),
		uint16(verbsock.OpCMReject), verbsock.Encode(nil, &verbsock.CMRejectReq{Conn: 1}), uint8(0))
	f.Add(uint16(verbsock.OpCMResolveUD), verbsock.Encode(nil, &verbsock.CMResolveUDReq{Dst: peer, DstPort: 1, PrivateLen: 255}), uint8(0),
		uint16(verbsock.OpCMDestroy), []byte{1, 0, 0, 0}, uint8(0))
	// Address resolution: the peer (answers ARP), and an address nobody has.
	f.Add(uint16(verbsock.OpCMResolveAddr), verbsock.Encode(nil, &verbsock.CMResolveAddrReq{Dst: peer, TimeoutMS: 5}), uint8(0),
		uint16(verbsock.OpCMResolveAddr), verbsock.Encode(nil, &verbsock.CMResolveAddrReq{Dst: [16]byte{10: 0xff, 11: 0xff, 12: 192, 15: 99}}), uint8(0))
	f.Fuzz(func(t *testing.T, op1 uint16, p1 []byte, fd1 uint8, op2 uint16, p2 []byte, fd2 uint8) {
		r := dialRaw(t, s, true)
		var pd verbsock.AllocPDResp
		_ = r.do(verbsock.OpAllocPD, &verbsock.Empty{}, nil, &pd)
		for _, q := range []struct {
			op uint16
			p  []byte
			fd uint8
		}{{op1, p1, fd1}, {op2, p2, fd2}} {
			if len(q.p) > verbsock.MaxMessage-verbsock.HeaderSize {
				q.p = q.p[:verbsock.MaxMessage-verbsock.HeaderSize]
			}
			var fds []int
			for i := range int(q.fd % 3) {
				size := shm.PageSize << (i % 2)
				if q.fd&0x80 != 0 {
					size = ring.Bytes(ring.EntriesFor(uint32(q.fd&0x3f)+1), ring.CQESize, shm.PageSize)
				}
				fd, err := shm.Create("vrnic-fuzz", size)
				if err != nil {
					t.Fatal(err)
				}
				fds = append(fds, fd)
			}
			h, _, rfds := r.send(verbsock.Header{Op: verbsock.Op(q.op)}, q.p, fds)
			for _, fd := range fds {
				unix.Close(fd)
			}
			verbsock.CloseFDs(rfds)
			if h.Status != 0 && syscall.Errno(h.Status) == 0 {
				t.Fatal("failed reply without errno")
			}
		}
		r.alive()
		r.c.Close()
		deadline := time.Now().Add(5 * time.Second)
		for s.Clients() > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		if s.Clients() != 0 {
			t.Fatal("connection not cleaned up after close")
		}
	})
}

// newServerCM is newServer with an rdma_cm agent whose address resolution
// gives up quickly (a fuzzed destination stalls the request loop that long).
func newServerCM(t testing.TB, limits verbsock.Limits) *server.Server {
	t.Helper()
	h, _ := nictest.Pair(t, 1500)
	ag := cmagent.New(h.Dev, cmagent.Config{ResolveTimeout: 20 * time.Millisecond})
	t.Cleanup(ag.Close)
	s, err := server.New(server.Config{Device: h.Dev, Limits: limits, WriteTimeout: time.Second, CM: ag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
