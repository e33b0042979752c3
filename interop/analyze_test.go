package interop_test

import (
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/interop/rxepeer"
	"github.com/vrnic/vrnicd/transport/wire"
)

// The timer check against hand-made captures: vrnicd's QP 0x11 sends to
// the peer's QP 0x22, whose responses come back to 0x11.
func TestAnalyzeRetransmits(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	req := func(at float64, op wire.Opcode, psn uint32) capFrame {
		return capFrame{at: ms(at), op: op, qp: 0x22, psn: psn, ackReq: true}
	}
	ack := func(at float64, psn uint32) capFrame {
		return capFrame{at: ms(at), toVrnicd: true, op: wire.RCAcknowledge, qp: 0x11, psn: psn, hasAETH: true}
	}
	nak := func(at float64, psn uint32) capFrame {
		f := ack(at, psn)
		f.syndrome = 0x60
		return f
	}
	atomicAck := func(at float64, psn uint32) capFrame {
		return capFrame{at: ms(at), toVrnicd: true, op: wire.RCAtomicAcknowledge, qp: 0x11, psn: psn, hasAETH: true}
	}
	send := wire.RCSendOnly
	read := func(at float64, psn uint32, n int) capFrame {
		f := req(at, wire.RCRDMAReadRequest, psn)
		f.readLen = n
		return f
	}
	readResp := func(at float64, psn uint32) capFrame {
		return capFrame{at: ms(at), toVrnicd: true, op: wire.RCRDMAReadResponseMiddle, qp: 0x11, psn: psn}
	}
	readResps := func(at float64, first, last uint32) []capFrame {
		var fs []capFrame
		for p := first; p <= last; p++ {
			fs = append(fs, readResp(at+0.01*float64(p-first), p))
		}
		return fs
	}
	cat := func(parts ...[]capFrame) []capFrame {
		var fs []capFrame
		for _, p := range parts {
			fs = append(fs, p...)
		}
		return fs
	}
	for _, tc := range []struct {
		name            string
		frames          []capFrame
		timeouts, early int
		want            string
	}{
		{"peer silent for the whole deadline", []capFrame{
			req(0, send, 100), req(67.6, send, 100), ack(80, 100), ack(81, 100),
		}, 1, 0, "then 67.6 ms without a response"},
		{"response after the deadline, before the retry left", []capFrame{
			req(0, send, 100), req(1, send, 101), ack(67.4, 100), req(67.6, send, 101), ack(70, 101),
		}, 1, 0, "timeout: armed at 0.000 ms, then 67.4 ms"},
		{"a response pushed the deadline out", []capFrame{
			req(0, send, 100), req(1, send, 101), ack(30, 100), req(67.5, send, 101), ack(70, 101),
		}, 0, 1, "last armed at 30.000 ms, 37.5 ms before"},
		{"everything acknowledged in time", []capFrame{
			req(0, send, 100), ack(20, 100), req(67.5, send, 100),
		}, 0, 1, "EARLY retry, a loss probe"},
		{"fired early", []capFrame{
			req(0, send, 100), req(40, send, 100),
		}, 0, 1, "last armed at 0.000 ms, 40.0 ms before"},
		{"retry on a sequence NAK", []capFrame{
			req(0, wire.RCSendFirst, 100), req(0.1, wire.RCSendMiddle, 101), req(0.2, wire.RCSendLast, 102),
			nak(1, 101), ack(1.01, 100), req(1.2, wire.RCSendMiddle, 101), req(1.3, wire.RCSendLast, 102), ack(3, 102),
		}, 0, 0, "a sequence NAK for it"},
		{"two sequence NAKs, the second acted on after the first's retry went out", []capFrame{
			req(0, wire.RCSendFirst, 100), req(0.1, wire.RCSendMiddle, 101), req(0.2, wire.RCSendMiddle, 102),
			req(0.3, wire.RCSendMiddle, 103), req(0.4, wire.RCSendLast, 104),
			nak(5, 101), nak(5.1, 103),
			req(9, wire.RCSendMiddle, 101), req(9.1, wire.RCSendMiddle, 102), req(9.2, wire.RCSendMiddle, 103), req(9.3, wire.RCSendLast, 104),
			req(12, wire.RCSendMiddle, 103), req(12.1, wire.RCSendLast, 104), ack(20, 104),
		}, 0, 0, "a sequence NAK for it 6.9 ms before"},
		{"an atomic's lost response", []capFrame{
			req(0, wire.RCFetchAdd, 100), req(0.1, wire.RCFetchAdd, 101), atomicAck(5, 101), req(5.2, wire.RCFetchAdd, 100),
			atomicAck(8, 100),
		}, 0, 0, "its response was lost"},
		{"two timeouts in a row, each a deadline apart", []capFrame{
			req(0, send, 100), req(67.3, send, 100), req(134.6, send, 100), ack(140, 100),
		}, 2, 0, "armed at 67.300 ms, then 67.3 ms"},
		{"a READ's probe after a resend of it, for the responses still missing", cat(
			[]capFrame{read(0, 100, 16<<10)}, readResps(1, 100, 115),
			[]capFrame{read(3, 116, 16<<10), read(70.1, 116, 16<<10)}, readResps(71, 116, 120),
			[]capFrame{read(140, 121, 11<<10)}, readResps(141, 121, 131),
		), 2, 0, "retry 2 at 140.000 ms: RC_RDMA_READ_REQUEST psn 0x000079 to qp 0x000022: timeout: armed at 71.040 ms, then 69.0 ms"},
		{"the second timeout came early", []capFrame{
			req(0, send, 100), req(67.3, send, 100), req(100, send, 100), ack(140, 100),
		}, 1, 1, "last armed at 67.300 ms, 32.7 ms before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := analyzeRetransmits(tc.frames, nil, localAckTimeout, 1024)
			if rep.timeouts != tc.timeouts || len(rep.early) != tc.early || !strings.Contains(rep.text, tc.want) {
				t.Errorf("timeouts %d (want %d), early %d (want %d), text lacks %q?\n%s",
					rep.timeouts, tc.timeouts, len(rep.early), tc.early, tc.want, rep.text)
			}
		})
	}
}

func TestTCPListening(t *testing.T) {
	table := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 00000000:4853 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n" +
		"   1: 0100007F:1F90 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1\n"
	if !tcpListening([]byte(table), 18515) {
		t.Error("port 18515 (0x4853) in LISTEN not found")
	}
	if tcpListening([]byte(table), 8080) {
		t.Error("port 8080 is ESTABLISHED, not LISTEN")
	}
}

// The one loss a ping-pong cannot survive, told apart from losses RC
// recovers from. The requester's QP 0x11 sends to the finisher's QP 0x22;
// frames are seen on the requester's TAP (s) and the finisher's (f).
func TestLostLastAck(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for _, stuckVrnicd := range []bool{true, false} {
		// toVrnicd is "from the guest" on both TAPs.
		req := func(at float64, psn uint32) capFrame {
			return capFrame{at: ms(at), toVrnicd: !stuckVrnicd, op: wire.RCSendOnly, qp: 0x22, psn: psn, ackReq: true}
		}
		ack := func(at float64, psn uint32) capFrame {
			return capFrame{at: ms(at), toVrnicd: stuckVrnicd, op: wire.RCAcknowledge, qp: 0x11, psn: psn, hasAETH: true}
		}
		// Message 100 completes; message 101's ACK leaves the finisher
		// and is lost; two retransmissions of 101 find nobody.
		s := []capFrame{req(0, 100), ack(2, 100), req(3, 101), req(70, 101), req(137, 101)}
		f := []capFrame{req(0.1, 100), ack(1.9, 100), req(3.1, 101), ack(3.5, 101), req(70.1, 101), req(137.1, 101)}
		pick := func(s, f []capFrame) (frames, guest []capFrame) {
			if stuckVrnicd {
				return s, f
			}
			return f, s
		}
		name := map[bool]string{true: "vrnicd waits", false: "the guest waits"}[stuckVrnicd]
		t.Run(name, func(t *testing.T) {
			frames, guest := pick(s, f)
			why, ok := lostLastAck(frames, guest, stuckVrnicd)
			if !ok || !strings.Contains(why, "the ACK of psn 0x000065 left the finisher's TAP at 3.500 ms") || !strings.Contains(why, "2 retransmitted packets") {
				t.Errorf("not recognised: %v %q", ok, why)
			}
			if _, ok := lostLastAck(frames, guest, !stuckVrnicd); ok {
				t.Error("recognised with the roles swapped")
			}
		})
		for _, neg := range []struct {
			name string
			s, f []capFrame
		}{
			{"the ACK arrived", append(s[:len(s):len(s)], ack(3.6, 101)), f},
			{"the finisher answered every retransmission", s, []capFrame{req(0.1, 100), ack(1.9, 100), req(3.1, 101), ack(3.5, 101),
				req(70.1, 101), ack(70.5, 101), req(137.1, 101), ack(137.5, 101)}},
			{"only requests the finisher never acknowledged go unanswered", []capFrame{req(0, 100), ack(2, 100), req(3, 101), req(70, 101)},
				[]capFrame{req(0.1, 100), ack(1.9, 100), req(3.1, 101), req(70.1, 101)}},
			{"no retransmission reached the finisher", s, f[:4]},
			{"the finisher never acknowledged", s, []capFrame{req(0.1, 100), ack(1.9, 100), req(3.1, 101), req(70.1, 101)}},
			{"the request never reached the finisher", s, f[:2]},
		} {
			t.Run(name+"/"+neg.name, func(t *testing.T) {
				frames, guest := pick(neg.s, neg.f)
				if why, ok := lostLastAck(frames, guest, stuckVrnicd); ok {
					t.Errorf("recognised: %s", why)
				}
			})
		}
	}
}

// A timeout that finds no retry left sends nothing and counts
// retry_exceeded_err; every other counted timeout must be a retry on the wire.
func TestTimerVerdictCountsRetryExceeded(t *testing.T) {
	t.Setenv("VRNICD_INTEROP_STRICT_TIMEOUTS", "")
	impaired := &bed{cfg: bedConfig{impaired: true}, vm: &rxepeer.VM{Accel: "tcg"}}
	clean := &bed{vm: &rxepeer.VM{Accel: "tcg"}}
	for _, tc := range []struct {
		name               string
		b                  *bed
		rto, exceeded      uint64
		goBacks            uint64
		episodes, timeouts int
		ok                 bool
	}{
		{"impaired: 7 retries and the give-up on each of two QPs", impaired, 16, 2, 0, 14, 14, true},
		{"impaired: a counted timeout the capture lacks", impaired, 16, 1, 0, 14, 14, false},
		{"impaired: retries of other kinds beside the timeouts", impaired, 3, 0, 0, 5, 1, true},
		{"clean: timeouts and one give-up", clean, 4, 1, 0, 3, 3, true},
		{"clean: a timeout the capture lacks", clean, 5, 1, 0, 3, 3, false},
		{"clean: a give-up counted as a retry", clean, 4, 0, 0, 3, 3, false},
		// A loss probe's go-back late in the timer's span looks like a
		// timeout on the wire; the daemon counted it as a go-back.
		{"clean: a late go-back the capture reads as a timeout", clean, 0, 0, 1, 1, 1, true},
		{"clean: a capture timeout no counter explains", clean, 0, 0, 0, 1, 1, false},
		{"clean: an early timer hidden among go-backs", clean, 2, 0, 5, 1, 1, false},
	} {
		ev := caseEvidence{rep: retryReport{episodes: tc.episodes, timeouts: tc.timeouts}}
		msg := tc.b.timerVerdict(tc.rto, tc.exceeded, tc.goBacks, ev)
		if (msg == "") != tc.ok {
			t.Errorf("%s: verdict %q, want ok=%v", tc.name, msg, tc.ok)
		}
	}
}
