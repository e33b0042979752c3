package link

import (
	"fmt"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// MaxFanout bounds OpenRawFanout's n (the kernel's PACKET_FANOUT_MAX is
// larger; a worker per core is the use).
const MaxFanout = 256

// skfNetOff is SKF_NET_OFF: classic BPF loads at skfNetOff+k read offset k
// from the network header whatever the skb's data pointer is at (the
// fanout hook runs with it at the network header, a socket filter with it
// at the MAC header).
const skfNetOff = 0xfff00000 // -0x100000 as the u32 in sock_filter.k

// OpenRawFanout opens n Raw links on cfg.Interface, each with its own
// socket (and ring, with cfg.Ring), joined in one PACKET_FANOUT group in
// PACKET_FANOUT_CBPF mode running FanoutProgram(n): each frame the
// interface receives goes to exactly one of them, a RoCEv2 frame to the
// link at index FanoutIndex(its BTH destination QP, n), any other frame to
// the link at index 0. cfg.Filter still applies, per link, after steering.
//
// Frames received before the last link has joined may be steered as if
// the group were smaller: open the group before traffic starts.
func OpenRawFanout(cfg RawConfig, n int) ([]*Raw, error) {
	if n < 1 || n > MaxFanout {
		return nil, fmt.Errorf("link: fanout of %d out of range 1..%d", n, MaxFanout)
	}
	links := make([]*Raw, 0, n)
	fail := func(err error) ([]*Raw, error) {
		for _, l := range links {
			l.Close()
		}
		return nil, fmt.Errorf("link: fanout on %s: %w", cfg.Interface, err)
	}
	// The kernel picks an unused group id (UNIQUEID) for the first socket;
	// the others join with the id, type and flags it reports. Frames the
	// host sends itself are ignored by the group's hook, not the sockets'.
	val := (unix.PACKET_FANOUT_CBPF | unix.PACKET_FANOUT_FLAG_UNIQUEID | unix.PACKET_FANOUT_FLAG_IGNORE_OUTGOING) << 16
	prog := FanoutProgram(n)
	for i := range n {
		l, err := OpenRaw(cfg)
		if err != nil {
			return fail(err)
		}
		links = append(links, l)
		if err := l.joinFanout(val); err != nil {
			return fail(err)
		}
		if i == 0 {
			if val, err = l.fanoutID(); err != nil {
				return fail(err)
			}
			if err := l.setFanoutProgram(prog); err != nil {
				return fail(err)
			}
		}
	}
	return links, nil
}

func (r *Raw) joinFanout(val int) error {
	var err error
	if cerr := r.rc.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_FANOUT, val)
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("PACKET_FANOUT: %w", err)
	}
	return nil
}

func (r *Raw) fanoutID() (int, error) {
	var v int
	var err error
	if cerr := r.rc.Control(func(fd uintptr) {
		v, err = unix.GetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_FANOUT)
	}); cerr != nil {
		return 0, cerr
	}
	if err != nil {
		return 0, fmt.Errorf("getsockopt PACKET_FANOUT: %w", err)
	}
	return v, nil
}

func (r *Raw) setFanoutProgram(prog []bpf.RawInstruction) error {
	fs := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		fs[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	var err error
	if cerr := r.rc.Control(func(fd uintptr) {
		err = unix.SetsockoptSockFprog(int(fd), unix.SOL_PACKET, unix.PACKET_FANOUT_DATA,
			&unix.SockFprog{Len: uint16(len(fs)), Filter: &fs[0]})
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("PACKET_FANOUT_DATA: %w", err)
	}
	return nil
}

// FanoutIndex is the fanout member a RoCEv2 packet for destQP goes to in a
// group of n (n ≥ 1): the worker that owns QP destQP.
func FanoutIndex(destQP uint32, n int) int {
	return int(destQP&0xffffff) % n
}

// FanoutProgram returns the classic BPF program OpenRawFanout steers with:
// for UDP to port 4791 over IPv4 (unfragmented, any IHL) or IPv6 (UDP as
// the first next header) it returns the BTH's 24-bit DestQP (BTH bytes
// 5..7, after the 8-byte UDP header) modulo n; for anything else, 0. n
// must be at least 1.
func FanoutProgram(n int) []bpf.RawInstruction {
	net := func(off uint32) uint32 { return skfNetOff + off }
	prog, err := bpf.Assemble([]bpf.Instruction{
		/* 0 */ bpf.LoadExtension{Num: bpf.ExtProto}, // EtherType
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x0800, SkipFalse: 9},
		/* 2 */ bpf.LoadAbsolute{Off: net(9), Size: 1}, // IPv4 protocol
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 17},
		/* 4 */ bpf.LoadAbsolute{Off: net(6), Size: 2}, // flags + fragment offset
		/* 5 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x3fff, SkipTrue: 15},
		/* 6 */ bpf.LoadAbsolute{Off: net(0), Size: 1}, // version + IHL
		/* 7 */ bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0x0f},
		/* 8 */ bpf.ALUOpConstant{Op: bpf.ALUOpShiftLeft, Val: 2},
		/* 9 */ bpf.TAX{}, // X = IPv4 header length
		/* 10 */ bpf.Jump{Skip: 4},
		/* 11 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x86dd, SkipFalse: 9},
		/* 12 */ bpf.LoadAbsolute{Off: net(6), Size: 1}, // IPv6 next header
		/* 13 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 7},
		/* 14 */ bpf.LoadConstant{Dst: bpf.RegX, Val: 40},
		/* 15 */ bpf.LoadIndirect{Off: net(2), Size: 2}, // UDP destination port
		/* 16 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4791, SkipFalse: 4},
		/* 17 */ bpf.LoadIndirect{Off: net(8 + 4), Size: 4}, // BTH bytes 4..7
		/* 18 */ bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xffffff}, // DestQP
		/* 19 */ bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(max(n, 1))},
		/* 20 */ bpf.RetA{},
		/* 21 */ bpf.RetConstant{Val: 0},
	})
	if err != nil {
		panic("link: FanoutProgram does not assemble: " + err.Error())
	}
	return prog
}
