package interop_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/interop/rxepeer"
	"github.com/vrnic/vrnicd/transport/wire"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/rocetest"
)

// TestSmoke boots one kernel-rxe guest on a bridge in a fresh namespace and
// checks the harness and the wire independently of vrnicd: rxe0 is active
// with the IPv4-mapped GID, the namespace reaches the guest, and a UD SEND
// built here with transport/wire (BTH, DETH, ICRC) is accepted by
// ibv_ud_pingpong in the guest, whose answer, captured on the bridge, is a
// kernel-made UD SEND with a valid ICRC carrying our payload back.
func TestSmoke(t *testing.T) {
	hostIP, guestIP := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	n := rxepeer.NewBridgeNetns(t, hostIP.String()+"/24")
	vm := rxepeer.Boot(t, rxepeer.Options{Netns: n, IP: guestIP.String() + "/24"})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	t.Run("devinfo", func(t *testing.T) {
		out, errOut, code, err := vm.Exec(ctx, "ibv_devinfo -d rxe0")
		if err != nil || code != 0 {
			t.Fatalf("ibv_devinfo: exit %d, %v\n%s%s", code, err, out, errOut)
		}
		for _, want := range []string{"hca_id:\trxe0", "PORT_ACTIVE (4)", "link_layer:\t\tEthernet"} {
			if !strings.Contains(out, want) {
				t.Errorf("ibv_devinfo lacks %q:\n%s", want, out)
			}
		}
		if vm.ActiveMTU != 1024 {
			t.Errorf("active MTU %d, want 1024 (eth0 MTU 1500)", vm.ActiveMTU)
		}
	})

	t.Run("gid", func(t *testing.T) {
		i := vm.GIDIndex()
		out, errOut, code, err := vm.Exec(ctx, fmt.Sprintf(
			"cd /sys/class/infiniband/rxe0/ports/1 && cat gids/%d gid_attrs/types/%d gid_attrs/ndevs/%d", i, i, i))
		if err != nil || code != 0 {
			t.Fatalf("reading GID %d: exit %d, %v: %s", i, code, err, errOut)
		}
		want := "0000:0000:0000:0000:0000:ffff:c000:0202\nRoCE v2\neth0\n"
		if out != want {
			t.Errorf("GID table entry %d = %q, want %q", i, out, want)
		}
		if got := netip.AddrFrom16(guestIP.As16()); vm.GID != got {
			t.Errorf("VM.GID = %v, want %v", vm.GID, got)
		}
	})

	t.Run("ping", func(t *testing.T) {
		rtt, err := n.Ping(ctx, guestIP)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("host namespace -> guest: echo reply in %v", rtt)
	})

	t.Run("ud-wire", func(t *testing.T) { udWire(ctx, t, n, vm, hostIP, guestIP) })
}

func udWire(ctx context.Context, t *testing.T, n *rxepeer.Netns, vm *rxepeer.VM, hostIP, guestIP netip.Addr) {
	const size = 64
	srv := vm.Start(fmt.Sprintf("ibv_ud_pingpong -d rxe0 -g %d -s %d -n 1 -e", vm.GIDIndex(), size))
	defer srv.Kill()
	if err := srv.WaitListen(ctx, rxepeer.PingpongPort); err != nil {
		t.Fatal(err)
	}

	// In the namespace: a capture on the bridge (which also sends our
	// frame), a UDP socket on 4791 so the host kernel does not answer the
	// guest's reply with port-unreachable, and the out-of-band connection.
	var udp *net.UDPConn
	var oob net.Conn
	pc, err := n.PacketSocket(n.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if err := n.Do(func() (err error) {
		if udp, err = net.ListenUDP("udp4", &net.UDPAddr{IP: hostIP.AsSlice(), Port: wire.RoCEv2Port}); err != nil {
			return err
		}
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		oob, err = d.DialContext(dctx, "tcp4", netip.AddrPortFrom(guestIP, rxepeer.PingpongPort).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	defer oob.Close()

	local := rxepeer.PingpongDest{QPN: 0x00abcd, PSN: 0x123456, GID: netip.AddrFrom16(hostIP.As16())}
	remote, err := rxepeer.PingpongClient(oob, local, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := netip.AddrFrom16(guestIP.As16()); remote.GID != want {
		t.Fatalf("server advertised GID %v, want %v", remote.GID, want)
	}
	t.Logf("ud server: QPN %#06x PSN %#06x GID %v", remote.QPN, remote.PSN, remote.GID)

	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	frame := rocetest.BuildFrame(&rocetest.FrameSpec{DstMAC: [6]byte(vm.MAC), SrcMAC: [6]byte(pc.MAC), Src: hostIP, Dst: guestIP,
		IPID: 0x2a2a, SrcPort: 0xc0de, Packet: wire.PacketFields{
			BTH:     wire.BTHFields{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: remote.QPN, PSN: local.PSN},
			DETH:    wire.DETHFields{QKey: rxepeer.PingpongQKey, SrcQP: local.QPN},
			Payload: payload,
		}})
	if err := pc.Send(frame); err != nil {
		t.Fatalf("sending the UD SEND: %v", err)
	}

	// The server answers with a UD SEND of its buffer, where our payload
	// landed after the 40-byte GRH: the same bytes come back.
	buf := make([]byte, 9000)
	deadline := time.Now().Add(30 * time.Second)
	var got []byte
	for got == nil {
		m, outgoing, err := pc.Recv(buf, time.Until(deadline))
		if err != nil {
			so, se := srv.Output()
			t.Fatalf("no UD SEND from the guest on %s: %v\nserver stdout:\n%s\nserver stderr:\n%s", n.Bridge, err, so, se)
		}
		if !outgoing && isRoCEFrom(buf[:m], guestIP) {
			got = append([]byte(nil), buf[:m]...)
		}
	}
	ip := got[14:]
	ip = ip[:binary.BigEndian.Uint16(ip[2:4])]
	if err := wire.VerifyICRC(ip); err != nil {
		t.Errorf("ICRC of the kernel's packet: %v", err)
	}
	var p wire.Packet
	if err := p.Parse(ip[header.IPv4HeaderLen+header.UDPHeaderLen:]); err != nil {
		t.Fatalf("parsing the kernel's packet: %v", err)
	}
	if op := p.BTH.Opcode(); op != wire.UDSendOnly {
		t.Errorf("opcode %v, want UD_SEND_ONLY", op)
	}
	if p.BTH.DestQP() != local.QPN || p.DETH.SrcQP() != remote.QPN || p.DETH.QKey() != rxepeer.PingpongQKey {
		t.Errorf("dest QP %#x src QP %#x Q_Key %#x, want %#x %#x %#x",
			p.BTH.DestQP(), p.DETH.SrcQP(), p.DETH.QKey(), local.QPN, remote.QPN, rxepeer.PingpongQKey)
	}
	if p.BTH.PSN() != remote.PSN || p.BTH.PKey() != wire.DefaultPKey {
		t.Errorf("PSN %#x P_Key %#x, want %#x %#x", p.BTH.PSN(), p.BTH.PKey(), remote.PSN, wire.DefaultPKey)
	}
	if !bytes.Equal(p.Payload, payload) {
		t.Errorf("payload back from the guest differs:\n got % x\nwant % x", p.Payload, payload)
	}
	// The host kernel delivered the same datagram to our UDP socket.
	_ = udp.SetReadDeadline(time.Now().Add(5 * time.Second))
	if m, _, err := udp.ReadFromUDP(buf); err != nil {
		t.Errorf("UDP socket on 4791: %v", err)
	} else if !bytes.Equal(buf[:m], ip[header.IPv4HeaderLen+header.UDPHeaderLen:]) {
		t.Errorf("UDP socket got a different datagram than the capture")
	}

	out, errOut, code, err := srv.Wait(ctx)
	if err != nil || code != 0 {
		t.Fatalf("ibv_ud_pingpong server: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if !strings.Contains(out, "1 iters in") {
		t.Errorf("server output lacks its summary:\n%s", out)
	}
}

// isRoCEFrom: an IPv4 UDP frame from src to port 4791.
func isRoCEFrom(f []byte, src netip.Addr) bool {
	if len(f) < 14+header.IPv4HeaderLen+header.UDPHeaderLen || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
		return false
	}
	ip := f[14:]
	s := src.As4()
	return ip[0] == 0x45 && ip[9] == 17 && bytes.Equal(ip[12:16], s[:]) &&
		binary.BigEndian.Uint16(ip[header.IPv4HeaderLen+2:]) == wire.RoCEv2Port
}

// TestImpairedGuest boots a guest behind rxepeer's user-space impairment
// link (bridge port -- veth -- Impair -- TAP): frames chosen by the test are
// dropped on the way in, everything else (ARP, ICMP, TCP, RoCEv2) passes.
func TestImpairedGuest(t *testing.T) {
	hostIP, guestIP := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.3")
	n := rxepeer.NewBridgeNetns(t, hostIP.String()+"/24")
	vm := rxepeer.Boot(t, rxepeer.Options{Netns: n, IP: guestIP.String() + "/24", Impaired: true})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	isEchoRequest := func(f []byte) bool {
		return len(f) >= 14+20+8 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[14+9] == 1 && f[14+20] == 8
	}
	vm.Impair.Set(rxepeer.ToGuest, rxepeer.Impairment{
		Match: isEchoRequest,
		Decide: func(i int, _ []byte) rxepeer.Action {
			if i == 0 {
				return rxepeer.Drop
			}
			return rxepeer.Pass
		},
	})
	rtt, err := n.Ping(ctx, guestIP)
	if err != nil {
		t.Fatal(err)
	}
	st := vm.Impair.Stats(rxepeer.ToGuest)
	if st.Dropped != 1 || st.Matched < 2 {
		t.Errorf("towards the guest: %+v; want the first echo request dropped and a second one passed", st)
	}
	t.Logf("ping answered (rtt %v) after the first request was dropped; to guest %+v, from guest %+v",
		rtt, st, vm.Impair.Stats(rxepeer.FromGuest))

	vm.Impair.Clear()
	t.Run("ud-wire", func(t *testing.T) { udWire(ctx, t, n, vm, hostIP, guestIP) })
	if err := vm.Impair.Err(); err != nil {
		t.Error(err)
	}
}
