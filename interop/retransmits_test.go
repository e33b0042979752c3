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
	early     []string // retries before a whole deadline of silence: loss probes
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
// A retry with no such silence is early: a tail loss probe (vrnicd's
// transport/tlp.go resends the oldest unacknowledged packet after a few
// round trips without progress, and later what was sent before an
// answered probe), not a timeout. The capture cannot tell a probe from a
// timer that fired early; the daemon's retransmit_timeouts counter can:
// timerVerdict requires it to equal the timeouts the capture justifies.
//
// guest, if not nil, is a capture on the guest's TAP, to say where the
// time went. pathMTU sizes READ requests (one PSN per response packet).
func analyzeRetransmits(frames, guest []capFrame, timeout time.Duration, pathMTU int) retryReport {
	a := &retryAnalysis{frames: frames, guest: guest, timeout: timeout, pathMTU: pathMTU,
		streams: map[uint32]*retryStream{}, peerMax: map[uint32]wire.PSN{}}
	// Our QP X (the DestQP of the peer's responses) sends requests to Y.
	a.pair = pairQPs(frames, func(f *capFrame) bool { return !f.toVrnicd })
	for i := range frames {
		f := &frames[i]
		info := f.op.Info()
		if info == nil || f.op.Transport() != 0 { // RC only
			continue
		}
		switch {
		case f.toVrnicd && info.Has(wire.FlagRequest):
			a.peerRequest(f)
		case f.toVrnicd && info.Has(wire.FlagResponse):
			a.response(f)
		case !f.toVrnicd && info.Has(wire.FlagRequest):
			a.request(i, f, info)
		}
	}
	a.summarize()
	return a.rep
}

// retrySlack is the allowance for the gap between the daemon's clock and
// the TAP's timestamps.
const retrySlack = 3 * time.Millisecond

// retryAnalysis is analyzeRetransmits' state over the capture.
type retryAnalysis struct {
	frames, guest []capFrame
	timeout       time.Duration
	pathMTU       int
	pair          map[uint32]uint32       // our requester QP → the peer's QP
	streams       map[uint32]*retryStream // by the peer's QP
	rep           retryReport
	b             strings.Builder
	peerDups      int
	peerMax       map[uint32]wire.PSN
}

// retryStream is one of our requesters as the capture shows it.
type retryStream struct {
	any, lastRetry   bool
	maxSent, lastPSN wire.PSN // maxSent: the last PSN the requests so far use
	acked            wire.PSN
	haveAcked        bool
	arms             []time.Duration // since the QP last became busy
	triggers         []*capFrame     // NAKs and responses not yet matched to a retry
	pending          []capFrame      // first transmissions waiting for a response
}

// outstanding says requests are unacknowledged: the timer runs.
func (s *retryStream) outstanding() bool {
	return s.any && (!s.haveAcked || s.maxSent.After(s.acked))
}

func (a *retryAnalysis) stream(y uint32) *retryStream {
	s := a.streams[y]
	if s == nil {
		s = &retryStream{}
		a.streams[y] = s
	}
	return s
}

// peerRequest counts the peer's duplicate requests (its own retries).
func (a *retryAnalysis) peerRequest(f *capFrame) {
	if m, ok := a.peerMax[f.qp]; ok && !wire.PSN(f.psn).After(m) {
		a.peerDups++
	} else {
		a.peerMax[f.qp] = wire.PSN(f.psn)
	}
}

// response takes a response (or NAK) to one of our requesters: a new
// acknowledged PSN re-arms the timer and completes the requests it covers.
func (a *retryAnalysis) response(f *capFrame) {
	y, ok := a.pair[f.qp]
	if !ok {
		return
	}
	s := a.stream(y)
	acked := wire.PSN(f.psn)
	if f.hasAETH {
		switch f.syndrome >> 5 {
		case 0:
		case 1: // RNR NAK: what precedes its PSN is done
			acked = acked.Sub(1)
		case 3:
			if f.syndrome&0x1f != 0 {
				return // an error NAK ends the QP: nothing to time
			}
			acked = acked.Sub(1) // sequence NAK: likewise
		default:
			return
		}
	}
	// Any response may show a READ's or atomic's response lost.
	s.triggers = append(s.triggers, f)
	if s.haveAcked && !acked.After(s.acked) {
		return
	}
	s.acked, s.haveAcked = acked, true
	s.arms = append(s.arms, f.at)
	k := 0
	for _, p := range s.pending {
		if wire.PSN(p.psn).After(acked) {
			s.pending[k] = p
			k++
			continue
		}
		a.rep.latencies = append(a.rep.latencies, f.at-p.at)
	}
	s.pending = s.pending[:k]
}

// request takes one of our requests (frame i): a first transmission arms
// the timer when it makes the QP busy; a retry that starts an episode is
// reported with its cause.
func (a *retryAnalysis) request(i int, f *capFrame, info *wire.OpInfo) {
	s := a.stream(f.qp)
	psn := wire.PSN(f.psn)
	last := psn
	if f.op == wire.RCRDMAReadRequest && f.readLen > 0 {
		last = psn.Add(uint32((f.readLen+a.pathMTU-1)/a.pathMTU) - 1)
	}
	retry := s.any && !psn.After(s.maxSent)
	if !retry {
		if !s.outstanding() {
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
	quiet := len(s.arms) > 0 && f.at-s.arms[len(s.arms)-1] >= a.timeout-retrySlack
	start := retry && (!s.lastRetry || !psn.After(s.lastPSN) || quiet)
	s.lastRetry, s.lastPSN = retry, psn
	if !start {
		return
	}
	a.rep.episodes++
	fmt.Fprintf(&a.b, "retry %d at %.3f ms: %v psn %#06x to qp %#06x", a.rep.episodes, msec(f.at), f.op, f.psn, f.qp)
	cause := s.trigger(f, info, psn)
	rearm := true
	if cause == "" {
		var timeout bool
		if cause, timeout = a.timeoutCause(s, f); timeout {
			a.rep.timeouts++
		}
		rearm = timeout // a probe leaves the timer as it runs (tlp.go)
	}
	if rearm {
		s.arms = append(s.arms[:0], f.at) // a NAK's or a timeout's retry re-arms the timer
	}
	a.b.WriteString(": " + cause)
	a.answers(i, f)
	if a.guest != nil {
		a.b.WriteString(whereTheTimeWent(f, a.frames, a.guest))
	}
	a.b.WriteByte('\n')
}

// trigger is what set off the retry f of psn, if a NAK or response did: one
// of the last quarter second not yet matched to a retry (vrnicd may act on
// a response some milliseconds after it reached the TAP, later than a
// retry for an earlier one went out). It is then matched; "" if none.
func (s *retryStream) trigger(f *capFrame, info *wire.OpInfo, psn wire.PSN) string {
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
	return cause
}

// timeoutCause judges the retry f that no response explains: a timeout
// if some arming since the previous retry was followed by a full timeout
// (less slack) without another, else an early retry (a loss probe; listed
// in the report).
func (a *retryAnalysis) timeoutCause(s *retryStream, f *capFrame) (string, bool) {
	timeout := a.timeout
	j := -1
	for k, e := range s.arms {
		next := f.at
		if k+1 < len(s.arms) {
			next = min(s.arms[k+1], f.at)
		}
		if e+timeout-retrySlack <= next {
			j = k
			break
		}
	}
	switch {
	case len(s.arms) == 0:
		return "timeout (the capture began after the request)", true
	case j >= 0:
		next := f.at
		if j+1 < len(s.arms) {
			next = min(s.arms[j+1], f.at)
		}
		return fmt.Sprintf("timeout: armed at %.3f ms, then %.1f ms without a response (deadline %.1f ms)",
			msec(s.arms[j]), msec(next-s.arms[j]), msec(timeout)), true
	}
	last := s.arms[len(s.arms)-1]
	a.rep.early = append(a.rep.early, fmt.Sprintf("retry at %.3f ms (psn %#06x) %.1f ms after the timer was last armed (at %.3f ms; deadline %.1f ms)",
		msec(f.at), f.psn, msec(f.at-last), msec(last), msec(timeout)))
	return fmt.Sprintf("EARLY retry, a loss probe (no timeout: the timer was last armed at %.3f ms, %.1f ms before; deadline %.1f ms)",
		msec(last), msec(f.at-last), msec(timeout)), false
}

// answers reports the responses with the retried PSN in the next second:
// one per copy means the peer got every copy and answered each late.
func (a *retryAnalysis) answers(i int, f *capFrame) {
	var answers []string
	for j := i + 1; j < len(a.frames) && a.frames[j].at-f.at < time.Second; j++ {
		g := &a.frames[j]
		gi := g.op.Info()
		if g.toVrnicd && gi != nil && gi.Has(wire.FlagResponse) && a.pair[g.qp] == f.qp && g.psn == f.psn {
			answers = append(answers, fmt.Sprintf("%+.1f", msec(g.at-f.at)))
		}
	}
	if len(answers) > 0 {
		if len(answers) > 8 {
			answers = append(answers[:8], "...")
		}
		fmt.Fprintf(&a.b, "; responses with its PSN at %s ms from it", strings.Join(answers, ","))
	}
}

// summarize ends the report: the counts and the peer's response times.
func (a *retryAnalysis) summarize() {
	rep := &a.rep
	fmt.Fprintf(&a.b, "%d retry episodes of vrnicd (%d timeouts, %d early: loss probes); %d duplicate requests from the peer (its own retries)\n",
		rep.episodes, rep.timeouts, len(rep.early), a.peerDups)
	if l := rep.latencies; len(l) > 0 {
		over := 0
		for _, d := range l {
			if d >= a.timeout {
				over++
			}
		}
		fmt.Fprintf(&a.b, "peer's response time to our requests: %s; %d at or over %.1f ms\n", durStats(l), over, msec(a.timeout))
	}
	rep.text = a.b.String()
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
