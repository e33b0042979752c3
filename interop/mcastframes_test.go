package interop_test

// The multicast frames and IGMP reports TestInteropMckey reads from its
// captures: a RoCEv2 frame to an IPv4 group decoded field by field, a
// capture's frame log, and IGMPv2/v3 membership reports.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/interop/rxepeer"
	"github.com/vrnic/vrnicd/transport/wire"
)

// mcastFrame is a RoCEv2 frame to an IPv4 group, decoded.
type mcastFrame struct {
	dstMAC, srcMAC [6]byte
	src, dst       netip.Addr
	tos, ttl       uint8
	flags          uint16 // IPv4 flags and fragment offset
	udpSrc, udpDst uint16
	udpSum         uint16
	pkt            wire.Packet
	icrc           error
}

// parseMcastRoCE decodes f when it is IPv4 UDP to port 4791 with a
// multicast destination address.
func parseMcastRoCE(f []byte) (mcastFrame, bool) {
	var r mcastFrame
	if len(f) < 14+20+8 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
		return r, false
	}
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if ip[0]>>4 != 4 || ihl < 20 || ip[9] != unix.IPPROTO_UDP || total > len(ip) || total < ihl+8 {
		return r, false
	}
	ip = ip[:total]
	r.dst = netip.AddrFrom4([4]byte(ip[16:20]))
	if !r.dst.IsMulticast() {
		return r, false
	}
	udp := ip[ihl:]
	if binary.BigEndian.Uint16(udp[2:]) != 4791 {
		return r, false
	}
	copy(r.dstMAC[:], f[0:6])
	copy(r.srcMAC[:], f[6:12])
	r.src = netip.AddrFrom4([4]byte(ip[12:16]))
	r.tos, r.ttl, r.flags = ip[1], ip[8], binary.BigEndian.Uint16(ip[6:])
	r.udpSrc, r.udpDst, r.udpSum = binary.BigEndian.Uint16(udp[0:]), binary.BigEndian.Uint16(udp[2:]), binary.BigEndian.Uint16(udp[6:])
	if err := r.pkt.Parse(udp[8:]); err != nil {
		return r, false
	}
	r.icrc = wire.VerifyICRC(ip)
	return r, true
}

// compareMcastFrames: the kernel's multicast message (kf) and vrnicd's
// (vf), as daemon A's TAP saw them, field by field.
func compareMcastFrames(t *testing.T, kf, vf []byte) {
	k, ok1 := parseMcastRoCE(kf)
	v, ok2 := parseMcastRoCE(vf)
	if !ok1 || !ok2 {
		t.Fatalf("undecodable frames:\nkernel % x\nvrnicd % x", kf, vf)
	}
	groupMAC := func(g netip.Addr) [6]byte {
		b := g.As4()
		return [6]byte{0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]}
	}
	type field struct {
		name     string
		kern, us any
		want     any // nil: only the same on both
	}
	imm := func(p *wire.Packet) any {
		if p.ImmDt == nil {
			return "none"
		}
		return fmt.Sprintf("%#x", p.ImmDt.Imm())
	}
	fields := []field{
		{"destination MAC is 01:00:5e + the group's low 23 bits", k.dstMAC == groupMAC(k.dst), v.dstMAC == groupMAC(v.dst), true},
		{"IP TOS (traffic class)", k.tos, v.tos, uint8(0)},
		{"IP TTL (the join's hop limit)", k.ttl, v.ttl, uint8(64)},
		{"IP flags/fragment (DF)", fmt.Sprintf("%#04x", k.flags), fmt.Sprintf("%#04x", v.flags), "0x4000"},
		{"UDP destination port", k.udpDst, v.udpDst, uint16(4791)},
		{"UDP checksum (none, as rxe's)", k.udpSum, v.udpSum, uint16(0)},
		{"BTH opcode", k.pkt.BTH.Opcode(), v.pkt.BTH.Opcode(), wire.UDSendOnlyWithImmediate},
		{"BTH SE", k.pkt.BTH.SE(), v.pkt.BTH.SE(), nil},
		{"BTH MigReq", k.pkt.BTH.MigReq(), v.pkt.BTH.MigReq(), nil},
		{"BTH PadCnt", k.pkt.BTH.PadCnt(), v.pkt.BTH.PadCnt(), nil},
		{"BTH TVer", k.pkt.BTH.TVer(), v.pkt.BTH.TVer(), uint8(0)},
		{"BTH P_Key", fmt.Sprintf("%#x", k.pkt.BTH.PKey()), fmt.Sprintf("%#x", v.pkt.BTH.PKey()), "0xffff"},
		{"BTH DestQP", fmt.Sprintf("%#x", k.pkt.BTH.DestQP()), fmt.Sprintf("%#x", v.pkt.BTH.DestQP()), "0xffffff"},
		{"BTH AckReq", k.pkt.BTH.AckReq(), v.pkt.BTH.AckReq(), false},
		{"DETH Q_Key", fmt.Sprintf("%#x", k.pkt.DETH.QKey()), fmt.Sprintf("%#x", v.pkt.DETH.QKey()), fmt.Sprintf("%#x", mckeyQKey)},
		{"payload bytes", len(k.pkt.Payload), len(v.pkt.Payload), 100},
		{"ICRC", fmt.Sprint(k.icrc), fmt.Sprint(v.icrc), "<nil>"},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-55s %-24s %-24s\n", "field", "kernel", "vrnicd")
	for _, f := range fields {
		fmt.Fprintf(&b, "%-55s %-24v %-24v\n", f.name, f.kern, f.us)
		if fmt.Sprint(f.kern) != fmt.Sprint(f.us) {
			t.Errorf("%s: kernel %v, vrnicd %v", f.name, f.kern, f.us)
		}
		if f.want != nil && fmt.Sprint(f.us) != fmt.Sprint(f.want) {
			t.Errorf("%s: %v, want %v", f.name, f.us, f.want)
		}
	}
	// mckey's immediate is the sender's QPN, which DETH carries as the
	// source QP.
	for who, p := range map[string]*wire.Packet{"kernel": &k.pkt, "vrnicd": &v.pkt} {
		if want := fmt.Sprintf("%#x", p.DETH.SrcQP()); imm(p) != want {
			t.Errorf("%s: immediate %v, want the source QP %s", who, imm(p), want)
		}
	}
	fmt.Fprintf(&b, "%-55s %-24s %-24s\n", "(group, destination MAC)", fmt.Sprintf("%s %s", k.dst, net.HardwareAddr(k.dstMAC[:])),
		fmt.Sprintf("%s %s", v.dst, net.HardwareAddr(v.dstMAC[:])))
	fmt.Fprintf(&b, "%-55s %-24s %-24s\n", "(sources: IP, QP, UDP port, PSN)",
		fmt.Sprintf("%s %#x %d %#x", k.src, k.pkt.DETH.SrcQP(), k.udpSrc, k.pkt.BTH.PSN()),
		fmt.Sprintf("%s %#x %d %#x", v.src, v.pkt.DETH.SrcQP(), v.udpSrc, v.pkt.BTH.PSN()))
	t.Logf("a multicast message of each, on daemon A's TAP:\n%s", b.String())
}

// frameLog keeps every IPv4 frame that is IGMP or multicast RoCEv2 on one
// device, whole, in order.
type frameLog struct {
	dev    string
	pc     *rxepeer.PacketConn
	start  time.Time
	frames recorder[loggedFrame]
	stop   chan struct{}
	done   chan struct{}
}

type loggedFrame struct {
	at       time.Duration
	outgoing bool
	b        []byte
}

func startFrameLog(t *testing.T, n *rxepeer.Netns, dev string, epoch time.Time) *frameLog {
	t.Helper()
	pc, err := n.PacketSocket(dev)
	if err != nil {
		t.Fatal(err)
	}
	l := &frameLog{dev: dev, pc: pc, start: epoch, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		buf := make([]byte, 10000)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			m, out, err := pc.Recv(buf, 100*time.Millisecond)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					continue
				}
				return
			}
			f := buf[:m]
			if _, ok := parseMcastRoCE(f); !ok && parseIGMP(f) == nil {
				continue
			}
			l.frames.add(loggedFrame{at: time.Since(l.start), outgoing: out, b: append([]byte(nil), f...)})
		}
	}()
	t.Cleanup(func() {
		close(l.stop)
		<-l.done
		pc.Close()
	})
	return l
}

func (l *frameLog) mark() int { return l.frames.mark() }

func (l *frameLog) since(i int) []loggedFrame { return l.frames.since(i) }

// igmpFrom returns the membership reports for g that src sent since mark
// (joins, not leaves).
func (l *frameLog) igmpFrom(mark int, src, g netip.Addr) []*igmpReport {
	var reps []*igmpReport
	for _, f := range l.since(mark) {
		if r := parseIGMP(f.b); r != nil && r.src == src && r.joins(g) {
			reps = append(reps, r)
		}
	}
	return reps
}

// waitIGMP waits, bounded by ctx, for src's report joining g; gone says
// the program that should join has ended (no report will come).
func (l *frameLog) waitIGMP(ctx context.Context, mark int, src, g netip.Addr, gone func() bool) (*igmpReport, error) {
	for {
		if reps := l.igmpFrom(mark, src, g); len(reps) > 0 {
			return reps[0], nil
		}
		if gone() {
			return nil, fmt.Errorf("ended without an IGMP report joining %s from %s on %s", g, src, l.dev)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no IGMP report joining %s from %s on %s: %w", g, src, l.dev, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// igmpReport is an IGMPv2 or v3 membership report.
type igmpReport struct {
	src, dst netip.Addr
	ttl      uint8
	ra       bool // IP Router Alert option
	typ      uint8
	records  []igmpRecord // v3; a v2 report or leave is one record
}

type igmpRecord struct {
	typ   uint8 // v3 record type; v2: 0x16 report, 0x17 leave
	group netip.Addr
}

func (r *igmpReport) joins(g netip.Addr) bool {
	for _, rec := range r.records {
		// v3: MODE_IS_EXCLUDE (2), CHANGE_TO_EXCLUDE_MODE (4); v2 report.
		if rec.group == g && (rec.typ == 2 || rec.typ == 4 || rec.typ == 0x16) {
			return true
		}
	}
	return false
}

// joinRecord is the type of the report's first record that joins a group.
func (r *igmpReport) joinRecord() uint8 {
	for _, rec := range r.records {
		if rec.typ == 2 || rec.typ == 4 || rec.typ == 0x16 {
			return rec.typ
		}
	}
	return 0
}

func (r *igmpReport) String() string {
	var recs []string
	for _, rec := range r.records {
		recs = append(recs, fmt.Sprintf("%d:%s", rec.typ, rec.group))
	}
	return fmt.Sprintf("IGMP type %#x %s -> %s ttl %d router-alert %v records [%s]", r.typ, r.src, r.dst, r.ttl, r.ra, strings.Join(recs, " "))
}

// parseIGMP decodes an IGMPv2/v3 report or v2 leave; nil if f is none.
func parseIGMP(f []byte) *igmpReport {
	if len(f) < 14+20+8 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
		return nil
	}
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if ip[0]>>4 != 4 || ihl < 20 || ip[9] != unix.IPPROTO_IGMP || total > len(ip) || total < ihl+8 {
		return nil
	}
	r := &igmpReport{src: netip.AddrFrom4([4]byte(ip[12:16])), dst: netip.AddrFrom4([4]byte(ip[16:20])), ttl: ip[8]}
	for o := ip[20:ihl]; len(o) >= 4; {
		if o[0] == 0x94 && o[1] == 4 {
			r.ra = true
		}
		if o[0] == 0 || o[0] == 1 || o[1] < 2 || int(o[1]) > len(o) {
			if o[0] == 1 {
				o = o[1:]
				continue
			}
			break
		}
		o = o[o[1]:]
	}
	igmp := ip[ihl:total]
	r.typ = igmp[0]
	switch r.typ {
	case 0x16, 0x17:
		r.records = []igmpRecord{{typ: r.typ, group: netip.AddrFrom4([4]byte(igmp[4:8]))}}
	case 0x22:
		n := int(binary.BigEndian.Uint16(igmp[6:]))
		rec := igmp[8:]
		for i := 0; i < n && len(rec) >= 8; i++ {
			aux, nsrc := int(rec[1])*4, int(binary.BigEndian.Uint16(rec[2:]))
			r.records = append(r.records, igmpRecord{typ: rec[0], group: netip.AddrFrom4([4]byte(rec[4:8]))})
			skip := 8 + 4*nsrc + aux
			if skip > len(rec) {
				break
			}
			rec = rec[skip:]
		}
	default:
		return nil
	}
	return r
}
