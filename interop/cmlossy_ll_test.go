package interop_test

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// cmFrame is the frame of a RoCEv2 UD SEND to destQP carrying a 256-byte
// MAD of class 7 (CM) and attribute attr, over IPv4 or IPv6, and where its
// MAD starts.
func cmFrame(v6 bool, destQP uint32, attr uint16) ([]byte, int) {
	mad := make([]byte, 256)
	mad[0], mad[1], mad[2] = 1, 0x07, 2
	binary.BigEndian.PutUint16(mad[16:], attr)
	f := rocetest.BuildFrame(&rocetest.FrameSpec{V6: v6, Packet: wire.PacketFields{
		BTH: wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: destQP}, Payload: mad}})
	return f, len(f) - wire.ICRCLen - len(mad)
}

// TestIsCMMAD: the CM MAD matcher takes a REQ over IPv4 and over IPv6 (the
// link-local GID's) alike, and neither a MAD to another QP, nor another
// class, nor a non-RoCEv2 port.
func TestIsCMMAD(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		f, off := cmFrame(v6, 1, 0x10)
		if !isCMMAD(f) || cmMADName(f) != "REQ" {
			t.Errorf("v6=%v: a REQ to QP1: isCMMAD %v, want true", v6, isCMMAD(f))
		}
		if f, _ := cmFrame(v6, 2, 0x10); isCMMAD(f) {
			t.Errorf("v6=%v: a CM MAD to QP2 matched", v6)
		}
		g := append([]byte(nil), f...)
		g[off+1] = 0x01 // SubnAdmin-class-like: not the CM's
		if isCMMAD(g) {
			t.Errorf("v6=%v: a class-1 MAD matched", v6)
		}
		g = append([]byte(nil), f...)
		udp := off - 8 - 12 - 8
		binary.BigEndian.PutUint16(g[udp+2:], 4792)
		if isCMMAD(g) {
			t.Errorf("v6=%v: UDP port 4792 matched", v6)
		}
		if isCMMAD(f[:off+200]) {
			t.Errorf("v6=%v: a short frame matched", v6)
		}
	}
}

// TestInteropUcmatoseLossyCMLinkLocal: TestInteropUcmatoseLossyCM's
// ucmatose each way over the IPv6 link-local GID (scoped fe80:: as for
// rping): the first REQ, REP and RTU lost once, then every CM MAD
// duplicated. The losses counted prove isCMMAD matched the IPv6 MADs.
func TestInteropUcmatoseLossyCMLinkLocal(t *testing.T) {
	n, vm, d := cmLossyBed(t)
	kG, vO := linkLocal(t, vm, d) // each side's own, in its own zone
	kO, vG := guest2ours(vO), ours2guest(kG, d)
	const args = "-c 2 -C 10 -S 100"
	runLossy(t, n, vm, d, map[string]lossyCase{
		"kernel-server": {port: 7471, kernelServer: true, kernel: "ucmatose -b " + kG + " " + args,
			ours:  append([]string{d.tools.ucmatose, "-s", vG}, strings.Fields(args)...),
			fromG: []string{"REP", "DREQ"}, toG: []string{"REQ", "RTU", "DREP"},
			lostFromG: []string{"REP"}, lostToG: []string{"REQ", "RTU"},
			check: func(t *testing.T, ko, so string) {
				checkSequence(t, "vrnic-ucmatose (client)", so, ucmatoseClientLines)
				checkSequence(t, "kernel ucmatose (server)", ko, ucmatoseServerLines)
			},
			counted: []string{"cm_tx_req", "cm_rx_rep", "cm_tx_rtu", "cm_rx_dreq", "cm_tx_drep"}, conns: 2, timeout: 100 * time.Second},
		"kernel-client": {port: 7471, kernel: "ucmatose -s " + kO + " " + args,
			ours:  append([]string{d.tools.ucmatose, "-b", vO}, strings.Fields(args)...),
			fromG: []string{"REQ", "RTU", "DREP"}, toG: []string{"REP", "DREQ"},
			lostFromG: []string{"REQ", "RTU"}, lostToG: []string{"REP"},
			check: func(t *testing.T, ko, so string) {
				checkSequence(t, "kernel ucmatose (client)", ko, ucmatoseClientLines)
				checkSequence(t, "vrnic-ucmatose (server)", so, ucmatoseServerLines)
			},
			counted: []string{"cm_rx_req", "cm_tx_rep", "cm_rx_rtu", "cm_tx_dreq", "cm_rx_drep"}, conns: 2, timeout: 100 * time.Second},
	})
}
