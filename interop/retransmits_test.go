package interop_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/vrnic/vrnicd/transport/wire"
)

// retryReport is analyzeRetransmits' verdict on one case's capture.
type retryReport struct {
	episodes  int      // retries of every kind
	timeouts  int      // retries that only a retransmit timeout explains
	spurious  []string // timeouts the capture does not justify
	latencies []time.Duration
	text      string
}

// analyzeRetransmits replays vrnicd's RC requesters from a capture on its
// TAP and accounts for every retry episode (a request PSN sent a second
// time). A retry starting at the PSN of a sequence NAK received before it,
// after an RNR NAK, or of a READ/atomic whose response a later response
// showed lost, is that event's; any other is a retransmit timeout, and it
// must be justified (IBA 9.7.6.1.1): the timer is armed when a request
// makes the QP busy, and again at every response that advances the
// acknowledged PSN and at every retry. A timeout at T is justified iff the
// last arming at or before T-timeout (give or take slack for the gap
// between the daemon's clock and the TAP) was followed by a full timeout
// without another arming: the peer was silent for the whole deadline.
// Otherwise the timer was spurious: a response had come in time.
//
// guest, if not nil, is a capture on the guest's TAP, to say where the
// time went. pathMTU sizes READ requests (one PSN per response packet).
func analyzeRetransmits(frames, guest []capFrame, timeout time.Duration, pathMTU int) retryReport {
	const slack = 3 * time.Millisecond
	type stream struct {
		any, lastRetry   bool
		maxSent, lastPSN wire.PSN // maxSent: the last PSN the requests so far use
		acked            wire.PSN
		haveAcked        bool
		arms             []time.Duration // since the QP last became busy
		triggers         []*capFrame     // NAKs and responses not yet matched to a retry
		pending          []capFrame      // first transmissions waiting for a response
	}
	outstanding := func(s *stream) bool { return s.any && (!s.haveAcked || s.maxSent.After(s.acked)) }
	// Our QP X (the DestQP of the peer's responses) sends requests to Y.
	pair := pairQPs(frames, func(f *capFrame) bool { return !f.toVrnicd })
	streams := map[uint32]*stream{}
	get := func(y uint32) *stream {
		s := streams[y]
		if s == nil {
			s = &stream{}
			streams[y] = s
		}
		return s
	}
	var rep retryReport
	var b strings.Builder
	peerDups := 0
	peerMax := map[uint32]wire.PSN{}
	for i := range frames {
		f := &frames[i]
		info := f.op.Info()
		if info == nil || f.op.Transport() != 0 { // RC only
			continue
		}
		switch {
		case f.toVrnicd && info.Has(wire.FlagRequest):
			if m, ok := peerMax[f.qp]; ok && !wire.PSN(f.psn).After(m) {
				peerDups++
			} else {
				peerMax[f.qp] = wire.PSN(f.psn)
			}
		case f.toVrnicd && info.Has(wire.FlagResponse):
			y, ok := pair[f.qp]
			if !ok {
				continue
			}
			s := get(y)
			a := wire.PSN(f.psn)
			if f.hasAETH {
				switch f.syndrome >> 5 {
				case 0:
				case 1: // RNR NAK: what precedes its PSN is done
					a = a.Sub(1)
				case 3:
					if f.syndrome&0x1f != 0 {
						continue // an error NAK ends the QP: nothing to time
					}
					a = a.Sub(1) // sequence NAK: likewise
				default:
					continue
				}
			}
			// Any response may show a READ's or atomic's response lost.
			s.triggers = append(s.triggers, f)
			if !s.haveAcked || a.After(s.acked) {
				s.acked, s.haveAcked = a, true
				s.arms = append(s.arms, f.at)
				k := 0
				for _, p := range s.pending {
					if wire.PSN(p.psn).After(a) {
						s.pending[k] = p
						k++
						continue
					}
					rep.latencies = append(rep.latencies, f.at-p.at)
				}
				s.pending = s.pending[:k]
			}
		case !f.toVrnicd && info.Has(wire.FlagRequest):
			s := get(f.qp)
			psn := wire.PSN(f.psn)
			last := psn
			if f.op == wire.RCRDMAReadRequest && f.readLen > 0 {
				last = psn.Add(uint32((f.readLen+pathMTU-1)/pathMTU) - 1)
			}
			retry := s.any && !psn.After(s.maxSent)
			if !retry {
				if !outstanding(s) {
					s.arms = append(s.arms[:0], f.at)
				}
				s.maxSent, s.any = last, true
				if f.ackReq || f.op == wire.RCRDMAReadRequest || info.Has(wire.FlagAtomic) {
					s.pending = append(s.pending, *f)
				}
			}
			// A retry starts an episode unless it continues the one before
			// (a later PSN of the same resend). A later PSN that follows
			// a whole deadline of silence since the timer was last armed
			// is a new timeout all the same: e.g. the probe for the rest
			// of a READ whose resent request was the last thing sent.
			quiet := len(s.arms) > 0 && f.at-s.arms[len(s.arms)-1] >= timeout-slack
			start := retry && (!s.lastRetry || !psn.After(s.lastPSN) || quiet)
			s.lastRetry, s.lastPSN = retry, psn
			if !start {
				continue
			}
			rep.episodes++
			fmt.Fprintf(&b, "retry %d at %.3f ms: %v psn %#06x to qp %#06x", rep.episodes, msec(f.at), f.op, f.psn, f.qp)
			// What set it off: a NAK or response of the last quarter second
			// not yet matched to a retry (vrnicd may act on a response some
			// milliseconds after it reached the TAP, later than a retry for
			// an earlier one went out).
			var cause string
			k := 0
			for _, g := range s.triggers {
				if f.at-g.at <= 250*time.Millisecond {
					s.triggers[k] = g
					k++
				}
			}
			s.triggers = s.triggers[:k]
			for k, g := range s.triggers {
				gp := wire.PSN(g.psn)
				switch {
				case g.hasAETH && g.syndrome == 0x60 && gp == psn:
					cause = fmt.Sprintf("a sequence NAK for it %.1f ms before", msec(f.at-g.at))
				case g.hasAETH && g.syndrome>>5 == 1:
					cause = fmt.Sprintf("an RNR NAK %.1f ms before", msec(f.at-g.at))
				case (f.op == wire.RCRDMAReadRequest || info.Has(wire.FlagAtomic)) && gp.After(psn):
					cause = fmt.Sprintf("a later response (%v psn %#06x) %.1f ms before: its response was lost", g.op, g.psn, msec(f.at-g.at))
				default:
					continue
				}
				s.triggers = append(s.triggers[:k], s.triggers[k+1:]...)
				break
			}
			if cause == "" {
				rep.timeouts++
				// The deadline expired if some arming since the previous retry
				// was followed by a full timeout (less slack) without another.
				j := -1
				for k, e := range s.arms {
					next := f.at
					if k+1 < len(s.arms) {
						next = min(s.arms[k+1], f.at)
					}
					if e+timeout-slack <= next {
						j = k
						break
					}
				}
				switch {
				case len(s.arms) == 0:
					cause = "timeout (the capture began after the request)"
				case j >= 0:
					next := f.at
					if j+1 < len(s.arms) {
						next = min(s.arms[j+1], f.at)
					}
					cause = fmt.Sprintf("timeout: armed at %.3f ms, then %.1f ms without a response (deadline %.1f ms)",
						msec(s.arms[j]), msec(next-s.arms[j]), msec(timeout))
				default:
					last := s.arms[len(s.arms)-1]
					cause = fmt.Sprintf("SPURIOUS timeout: the timer was last armed at %.3f ms, %.1f ms before (deadline %.1f ms)",
						msec(last), msec(f.at-last), msec(timeout))
					rep.spurious = append(rep.spurious, fmt.Sprintf("timeout at %.3f ms (psn %#06x) %.1f ms after the timer was last armed (at %.3f ms; deadline %.1f ms)",
						msec(f.at), f.psn, msec(f.at-last), msec(last), msec(timeout)))
				}
			}
			s.arms = append(s.arms[:0], f.at) // every retry re-arms the timer
			b.WriteString(": " + cause)
			// Responses with the retried PSN in the next second: one per
			// copy means the peer got every copy and answered each late.
			var answers []string
			for j := i + 1; j < len(frames) && frames[j].at-f.at < time.Second; j++ {
				g := &frames[j]
				gi := g.op.Info()
				if g.toVrnicd && gi != nil && gi.Has(wire.FlagResponse) && pair[g.qp] == f.qp && g.psn == f.psn {
					answers = append(answers, fmt.Sprintf("%+.1f", msec(g.at-f.at)))
				}
			}
			if len(answers) > 0 {
				if len(answers) > 8 {
					answers = append(answers[:8], "...")
				}
				fmt.Fprintf(&b, "; responses with its PSN at %s ms from it", strings.Join(answers, ","))
			}
			if guest != nil {
				b.WriteString(whereTheTimeWent(f, frames, guest))
			}
			b.WriteByte('\n')
		}
	}
	fmt.Fprintf(&b, "%d retry episodes of vrnicd (%d timeouts, %d spurious); %d duplicate requests from the peer (its own retries)\n",
		rep.episodes, rep.timeouts, len(rep.spurious), peerDups)
	if l := rep.latencies; len(l) > 0 {
		over := 0
		for _, d := range l {
			if d >= timeout {
				over++
			}
		}
		fmt.Fprintf(&b, "peer's response time to our requests: %s; %d at or over %.1f ms\n", durStats(l), over, msec(timeout))
	}
	rep.text = b.String()
	return rep
}

// pairQPs maps each requester QP X (the DestQP of the responses it gets)
// to the responder QP Y it sends to, matching responses to requests by
// PSN. fromRequester: the frame left the requester's side.
func pairQPs(frames []capFrame, fromRequester func(*capFrame) bool) map[uint32]uint32 {
	pair := map[uint32]uint32{}
	lastReqTo := map[uint32]uint32{}
	for i := range frames {
		f := &frames[i]
		info := f.op.Info()
		if info == nil {
			continue
		}
		if fromRequester(f) && info.Has(wire.FlagRequest) {
			lastReqTo[f.psn] = f.qp
		} else if !fromRequester(f) && info.Has(wire.FlagResponse) {
			if y, ok := lastReqTo[f.psn]; ok {
				pair[f.qp] = y
			}
		}
	}
	return pair
}
