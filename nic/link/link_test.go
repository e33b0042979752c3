package link_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/bpf"

	"github.com/vrnic/vrnicd/header"
	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/nic/link/linktest"
)

func frame(dst, src net.HardwareAddr, etype uint16, payload []byte) []byte {
	f := make([]byte, 14+len(payload))
	copy(f, dst)
	copy(f[6:], src)
	binary.BigEndian.PutUint16(f[12:], etype)
	copy(f[14:], payload)
	return f
}

func TestPipeReadWrite(t *testing.T) {
	a, b := link.Pipe(1500)
	defer a.Close()
	defer b.Close()
	const headroom = 8
	var bufs [][]byte
	for i := range 3 {
		f := frame(b.HardwareAddr(), a.HardwareAddr(), 0x88b5, []byte{byte(i), 1, 2, 3})
		bufs = append(bufs, append(make([]byte, headroom), f...))
	}
	if n, err := a.Write(bufs, headroom); n != 3 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	rb := make([][]byte, 8)
	sizes := make([]int, 8)
	for i := range rb {
		rb[i] = make([]byte, 4+1514)
	}
	n, err := b.Read(rb, sizes, 4)
	if n != 3 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	for i := range n {
		if got := rb[i][4 : 4+sizes[i]]; !bytes.Equal(got, bufs[i][headroom:]) {
			t.Errorf("frame %d = %x, want %x", i, got, bufs[i][headroom:])
		}
	}
	// Oversized frames are refused.
	big := frame(b.HardwareAddr(), a.HardwareAddr(), 0x88b5, make([]byte, 1501))
	if _, err := a.Write([][]byte{big}, 0); !errors.Is(err, link.ErrFrameTooBig) {
		t.Errorf("oversized Write err = %v", err)
	}
}

func TestPipeCloseInterruptsRead(t *testing.T) {
	a, b := link.Pipe(1500)
	defer b.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := a.Read([][]byte{make([]byte, 1514)}, []int{0}, 0)
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	a.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read not interrupted by Close")
	}
	if _, err := a.Write([][]byte{frame(b.HardwareAddr(), a.HardwareAddr(), 0x800, make([]byte, 46))}, 0); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
}

func TestPipeHooks(t *testing.T) {
	a, b := link.Pipe(1500)
	defer a.Close()
	defer b.Close()
	k := 0
	a.SetHook(func(f []byte) link.Action {
		k++
		switch k {
		case 1:
			return link.Hold // reordered behind frame 2
		case 3:
			return link.Drop
		case 4:
			f[14] ^= 0xff // corrupt
		}
		return link.Deliver
	})
	var in [][]byte
	for i := range 4 {
		in = append(in, frame(b.HardwareAddr(), a.HardwareAddr(), 0x88b5, []byte{byte(i)}))
	}
	if _, err := a.Write(in, 0); err != nil {
		t.Fatal(err)
	}
	rb := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64), make([]byte, 64)}
	sizes := make([]int, 4)
	n, _ := b.Read(rb, sizes, 0)
	var got []byte
	for i := range n {
		got = append(got, rb[i][14])
	}
	if want := []byte{1, 0, 3 ^ 0xff}; !bytes.Equal(got, want) {
		t.Fatalf("delivered payload bytes %x, want %x", got, want)
	}
	if a.Lost.Load() != 1 {
		t.Errorf("Lost = %d, want 1", a.Lost.Load())
	}
}

// roceProbe builds a well-formed IPv4 or IPv6 frame (bridges with
// br_netfilter drop malformed IPv4) with a UDP-sized header and payload.
func roceProbe(v6 bool, proto uint8, dport uint16, frag uint16, payload ...byte) []byte {
	if v6 {
		p := make([]byte, 40+8, 48+len(payload))
		p[0] = 0x60
		binary.BigEndian.PutUint16(p[4:], uint16(8+len(payload)))
		p[6] = proto
		p[7] = 64
		binary.BigEndian.PutUint16(p[40+2:], dport)
		binary.BigEndian.PutUint16(p[40+4:], uint16(8+len(payload)))
		p = append(p, payload...)
		return frame(make(net.HardwareAddr, 6), make(net.HardwareAddr, 6), 0x86dd, p)
	}
	p := make([]byte, 20+8, 28+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(28+len(payload)))
	binary.BigEndian.PutUint16(p[6:], frag)
	p[8] = 64
	p[9] = proto
	copy(p[12:], []byte{192, 0, 2, 1, 192, 0, 2, 2})
	binary.BigEndian.PutUint16(p[10:], header.Checksum(p[:20]))
	binary.BigEndian.PutUint16(p[20+2:], dport)
	binary.BigEndian.PutUint16(p[20+4:], uint16(8+len(payload)))
	p = append(p, payload...)
	return frame(make(net.HardwareAddr, 6), make(net.HardwareAddr, 6), 0x0800, p)
}

func TestRoCEFilter(t *testing.T) {
	var ins []bpf.Instruction
	for _, r := range link.RoCEFilter() {
		ins = append(ins, r.Disassemble())
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	am := make([]byte, header.ARPLen)
	header.ARP(am).Encode(&header.ARPFields{Op: header.ARPRequest, SenderIP: [4]byte{192, 0, 2, 1}, TargetIP: [4]byte{192, 0, 2, 2}})
	arp := frame(make(net.HardwareAddr, 6), make(net.HardwareAddr, 6), header.EtherTypeARP, am)
	for _, tc := range []struct {
		name string
		f    []byte
		want bool
	}{
		{"ipv4 udp 4791", roceProbe(false, 17, 4791, 0x4000), true},
		{"ipv6 udp 4791", roceProbe(true, 17, 4791, 0), true},
		{"ipv4 udp 53", roceProbe(false, 17, 53, 0x4000), false},
		{"ipv4 tcp 4791", roceProbe(false, 6, 4791, 0), false},
		{"ipv4 fragment", roceProbe(false, 17, 4791, 0x2000), false},
		{"ipv6 tcp", roceProbe(true, 6, 4791, 0), false},
		{"arp", arp, false},
		{"runt", []byte{1, 2, 3}, false},
	} {
		n, err := vm.Run(tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := n > 0; got != tc.want {
			t.Errorf("%s: accepted = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestTAPAndRawOverBridge opens a TAP in namespace A, bridges it to a veth
// whose peer is in namespace B, and checks frames both ways: TAP → raw
// (filtered to RoCE) and raw → TAP.
func TestTAPAndRawOverBridge(t *testing.T) {
	linktest.RequireRoot(t)
	nsA := linktest.NewNS(t, "lka")
	nsB := linktest.NewNS(t, "lkb")
	tapName, br, va, vb := linktest.UniqueName("tp"), linktest.UniqueName("br"), linktest.UniqueName("va"), linktest.UniqueName("vb")

	var tap *link.TAP
	if err := nsA.Do(func() (err error) {
		tap, err = link.OpenTAP(link.TAPConfig{Name: tapName, MTU: 1400})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	if tap.Name() != tapName || tap.MTU() != 1400 {
		t.Fatalf("TAP %s mtu %d", tap.Name(), tap.MTU())
	}
	out := nsA.Exec(t, "ip", "-o", "link", "show", tapName)
	if !bytes.Contains([]byte(out), []byte("mtu 1400")) || !bytes.Contains([]byte(out), []byte("UP")) {
		t.Fatalf("TAP not up with MTU 1400: %s", out)
	}
	linktest.BridgedVeth(t, nsA, br, va, nsB, vb)
	nsA.Exec(t, "ip", "link", "set", tapName, "master", br)

	var raw *link.Raw
	if err := nsB.Do(func() (err error) {
		raw, err = link.OpenRaw(link.RawConfig{Interface: vb, Filter: link.RoCEFilter()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	// TAP → raw: a non-RoCE frame (filtered out) then three RoCE-looking frames.
	var bufs [][]byte
	junk := frame(raw.HardwareAddr(), tap.HardwareAddr(), 0x88b5, make([]byte, 50))
	bufs = append(bufs, junk)
	for i := range 3 {
		f := roceProbe(false, 17, 4791, 0x4000, byte(i), 0, 0, 0)
		copy(f, raw.HardwareAddr())
		copy(f[6:], tap.HardwareAddr())
		bufs = append(bufs, f)
	}
	if n, err := tap.Write(bufs, 0); n != 4 || err != nil {
		t.Fatalf("TAP Write = %d, %v", n, err)
	}
	got := readFrames(t, raw, 3)
	for i, f := range got {
		if !bytes.Equal(f, bufs[i+1]) {
			t.Errorf("raw frame %d = %x, want %x", i, f, bufs[i+1])
		}
	}

	// raw → TAP, batch of two.
	w := [][]byte{
		append(make([]byte, 10), frame(tap.HardwareAddr(), raw.HardwareAddr(), 0x88b5, bytes.Repeat([]byte{7}, 60))...),
		append(make([]byte, 10), frame(tap.HardwareAddr(), raw.HardwareAddr(), 0x88b5, bytes.Repeat([]byte{8}, 70))...),
	}
	if n, err := raw.Write(w, 10); n != 2 || err != nil {
		t.Fatalf("raw Write = %d, %v", n, err)
	}
	var seen int
	deadline := time.Now().Add(5 * time.Second)
	for seen < 2 && time.Now().Before(deadline) {
		for _, f := range readFrames(t, tap, 1) {
			// The kernel side of the TAP also sends IPv6 chatter; skip it.
			if seen < len(w) && bytes.Equal(f, w[seen][10:]) {
				seen++
			}
		}
	}
	if seen != 2 {
		t.Fatalf("TAP saw %d of 2 frames", seen)
	}

	// Close interrupts a blocked Read on both kinds.
	for _, l := range []link.Link{raw, tap} {
		errc := make(chan error, 1)
		go func() {
			b := [][]byte{make([]byte, 2048)}
			for {
				if _, err := l.Read(b, []int{0}, 0); err != nil {
					errc <- err
					return
				}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		l.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("%s: Read after Close: %v", l.Name(), err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Read not interrupted by Close", l.Name())
		}
	}
	// The TAP disappears with its file descriptor.
	if out, err := nsA.TryExec("ip", "link", "show", tapName); err == nil {
		t.Errorf("TAP still exists after Close: %s", out)
	}
}

// readFrames reads until it has want frames or 5 s pass.
func readFrames(t *testing.T, l link.Link, want int) [][]byte {
	t.Helper()
	type res struct {
		f   [][]byte
		err error
	}
	c := make(chan res, 1)
	go func() {
		var out [][]byte
		bufs := make([][]byte, l.BatchSize())
		sizes := make([]int, len(bufs))
		for i := range bufs {
			bufs[i] = make([]byte, 4+l.MTU()+14)
		}
		for len(out) < want {
			n, err := l.Read(bufs, sizes, 4)
			if err != nil {
				c <- res{out, err}
				return
			}
			for i := range n {
				out = append(out, append([]byte(nil), bufs[i][4:4+sizes[i]]...))
			}
		}
		c <- res{out, nil}
	}()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("%s Read: %v", l.Name(), r.err)
		}
		return r.f
	case <-time.After(5 * time.Second):
		l.Close()
		t.Fatalf("%s: timed out waiting for %d frames", l.Name(), want)
	}
	return nil
}

// TestRawFinishesLocalSendersChecksums: a kernel UDP socket sending over a
// veth leaves its checksum for the device to finish (CHECKSUM_PARTIAL); the
// raw link must hand the stack a frame whose UDP checksum verifies, over
// IPv4 and IPv6.
func TestRawFinishesLocalSendersChecksums(t *testing.T) {
	linktest.RequireRoot(t)
	nsA := linktest.NewNS(t, "cka")
	nsB := linktest.NewNS(t, "ckb")
	va, vb := linktest.UniqueName("va"), linktest.UniqueName("vb")
	linktest.VethPair(t, nsA, va, nsB, vb)
	nsA.Exec(t, "ip", "addr", "add", "192.0.2.1/24", "dev", va)
	nsA.Exec(t, "ip", "addr", "add", "2001:db8::1/64", "dev", va, "nodad")
	nsB.Exec(t, "ip", "addr", "add", "192.0.2.2/24", "dev", vb)
	nsB.Exec(t, "ip", "addr", "add", "2001:db8::2/64", "dev", vb, "nodad")

	var raw *link.Raw
	if err := nsB.Do(func() (err error) {
		raw, err = link.OpenRaw(link.RawConfig{Interface: vb, Filter: link.RoCEFilter()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	for _, dst := range []string{"192.0.2.2", "2001:db8::2"} {
		payload := bytes.Repeat([]byte{0x5a}, 301)
		if err := nsA.Do(func() error {
			c, err := net.Dial("udp", net.JoinHostPort(dst, "4791"))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write(payload)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		f := readFrames(t, raw, 1)[0]
		src, to, udp, err := udpOf(f)
		if err != nil {
			t.Fatalf("%s: %v: %x", dst, err, f)
		}
		if !bytes.Equal(udp[8:], payload) {
			t.Fatalf("%s: payload %x", dst, udp[8:])
		}
		if binary.BigEndian.Uint16(udp[6:]) == 0 || header.L4Checksum(src, to, 17, udp) != 0 {
			t.Errorf("%s: UDP checksum %#04x does not verify", dst, binary.BigEndian.Uint16(udp[6:]))
		}
	}
}

// udpOf splits an untagged IPv4/IPv6 UDP frame.
func udpOf(f []byte) (src, dst netip.Addr, udp []byte, err error) {
	if len(f) < 14+40+8 {
		return src, dst, nil, errors.New("short frame")
	}
	ip := f[14:]
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(ip[0]&0xf) * 4
		return netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])),
			ip[ihl:binary.BigEndian.Uint16(ip[2:])], nil
	case 0x86dd:
		return netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])),
			ip[40 : 40+binary.BigEndian.Uint16(ip[4:])], nil
	}
	return src, dst, nil, errors.New("not IP")
}
