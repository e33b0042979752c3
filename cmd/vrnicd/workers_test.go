package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/link/linktest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// TestRawWorkersFanout: two raw-mode daemons with --workers 2 on the two
// ends of a veth. Each reads a PACKET_FANOUT group of two sockets, one per
// worker, steered by BTH destination QP; QPs 0x11 and 0x12 belong to
// different workers, and both RC connections carry SENDs and WRITEs whole.
func TestRawWorkersFanout(t *testing.T) {
	linktest.RequireRoot(t)
	binaries(t)
	nsA := linktest.NewNS(t, "vwa")
	nsB := linktest.NewNS(t, "vwb")
	va, vb := linktest.UniqueName("wa"), linktest.UniqueName("wb")
	linktest.VethPair(t, nsA, va, nsB, vb)
	nsA.Exec(t, "ip", "addr", "add", "198.51.100.1/24", "dev", va)
	nsB.Exec(t, "ip", "addr", "add", "198.51.100.2/24", "dev", vb)
	dir := t.TempDir()
	sockA, sockB := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	a := startDaemon(t, nsA, nil, "--iface", va, "--workers", "2", "--socket", sockA, "--name", "vrnicA")
	b := startDaemon(t, nsB, nil, "--iface", vb, "--workers", "2", "--socket", sockB, "--name", "vrnicB")
	for _, d := range []*daemonProc{a, b} {
		if w, _ := d.ready["workers"].(float64); w != 2 {
			t.Fatalf("ready line says workers %v, want 2", d.ready["workers"])
		}
	}
	addrA, addrB := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	for i := range 2 {
		t.Run(fmt.Sprintf("qp%d", i), func(t *testing.T) {
			ca, cb := openSide(t, sockA, "vrnicA", addrA), openSide(t, sockB, "vrnicB", addrB)
			defer ca.close()
			defer cb.close()
			if ca.qp.QPN() != uint32(0x11+i) || cb.qp.QPN() != uint32(0x11+i) {
				t.Fatalf("QPNs %#x and %#x, want %#x (one per worker)", ca.qp.QPN(), cb.qp.QPN(), 0x11+i)
			}
			connectRC(t, ca, cb)
			src := ca.buf.Bytes()[:20000]
			for j := range src {
				src[j] = byte(j*5 + i)
			}
			for k := range 20 {
				if err := cb.qp.PostRecv(verbs.RecvWR{ID: uint64(k), SGL: []verbs.SGE{cb.mr.SGE(0, 8192)}}); err != nil {
					t.Fatal(err)
				}
				if err := ca.qp.PostSend(verbs.SendWR{ID: uint64(k), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{ca.mr.SGE(uint64(k), 3000)}}); err != nil {
					t.Fatal(err)
				}
				if wc := poll1(t, cb.rcq); wc.Status != verbs.WCSuccess || wc.ByteLen != 3000 {
					t.Fatalf("QP %#x receive %d: %+v", cb.qp.QPN(), k, wc)
				}
				if wc := poll1(t, ca.scq); wc.Status != verbs.WCSuccess {
					t.Fatalf("QP %#x send %d: %+v", ca.qp.QPN(), k, wc)
				}
				if !bytes.Equal(cb.buf.Bytes()[:3000], src[k:k+3000]) {
					t.Fatalf("QP %#x SEND %d data differs", cb.qp.QPN(), k)
				}
			}
			if err := ca.qp.PostSend(verbs.SendWR{ID: 99, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{ca.mr.SGE(0, 20000)}, RemoteAddr: cb.mr.Addr() + 100000, RKey: cb.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if wc := poll1(t, ca.scq); wc.Status != verbs.WCSuccess {
				t.Fatalf("WRITE %+v", wc)
			}
			if !bytes.Equal(cb.buf.Bytes()[100000:120000], src) {
				t.Fatal("WRITE data differs")
			}
		})
	}
	for _, d := range []*daemonProc{a, b} {
		d.signal(syscall.SIGTERM)
		if code, ok := d.wait(5 * time.Second); !ok || code != 0 {
			t.Fatalf("exit: %v %d", ok, code)
		}
	}
}
