package cm

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/vrnic/vrnicd/transport/transporttest"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// sim joins an active and a passive Table through an in-memory exchange
// that loses or duplicates MADs as told, with consumers that behave like
// rping: the server accepts and answers a disconnect, the client
// disconnects once both sides are established.
type sim struct {
	t        *testing.T
	clock    *transporttest.ManualClock
	tabs     [2]*Table
	ips      [2]netip.Addr
	queue    []simPacket
	lose     func(to int, attr uint16, nth int) bool
	dup      func() bool
	seen     map[uint16]int
	events   [2][]EventKind
	ids      [2]uint32
	estab    [2]bool
	discSent bool
	closer   int // the side that disconnects
}

type simPacket struct {
	to  int
	mad [mad.Size]byte
}

const (
	simActive  = 0
	simPassive = 1
)

func newSim(t *testing.T) *sim {
	clock := transporttest.NewManualClock()
	s := &sim{t: t, clock: clock, ips: [2]netip.Addr{activeIP, passiveIP}, seen: map[uint16]int{},
		lose: func(int, uint16, int) bool { return false }, dup: func() bool { return false }}
	s.tabs[simActive] = NewTable(Config{LocalCAGUID: 0xa}, clock)
	s.tabs[simPassive] = NewTable(Config{LocalCAGUID: 0xb}, clock)
	if _, err := s.tabs[simPassive].Listen(ServiceID(PortSpaceTCP, 7174), passiveIP); err != nil {
		t.Fatal(err)
	}
	return s
}

// handle does what a Table's Output asks of side i.
func (s *sim) handle(i int, out *Output) {
	for _, snd := range out.Sends {
		if snd.To != s.ips[1-i] {
			s.t.Fatalf("side %d sent to %v", i, snd.To)
		}
		attr := uint16(snd.MAD[16])<<8 | uint16(snd.MAD[17])
		s.seen[attr]++
		if s.lose(1-i, attr, s.seen[attr]) {
			continue
		}
		s.queue = append(s.queue, simPacket{1 - i, snd.MAD})
		if s.dup() {
			s.queue = append(s.queue, simPacket{1 - i, snd.MAD})
		}
	}
	evs := slices.Clone(out.Events)
	out.Reset()
	for _, ev := range evs {
		s.events[i] = append(s.events[i], ev.Kind)
		s.react(i, ev)
	}
}

// react is the consumers' part.
func (s *sim) react(i int, ev Event) {
	var out Output
	tb := s.tabs[i]
	switch ev.Kind {
	case EventConnectRequest:
		s.ids[i] = ev.ID
		if err := tb.Accept(ev.ID, rpingAccept(), &out); err != nil {
			s.t.Fatal(err)
		}
	case EventEstablished:
		s.estab[i] = true
	case EventDisconnected:
		if c, _ := tb.Conn(ev.ID); c.State == StateDREQRcvd {
			if err := tb.Disconnect(ev.ID, nil, &out); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	s.handle(i, &out)
}

// run drives the exchange until both tables are empty, delivering every
// queued MAD before moving the clock to the next deadline.
func (s *sim) run() error {
	var out Output
	id, err := s.tabs[simActive].Connect(rpingConnect(), &out)
	if err != nil {
		return err
	}
	s.ids[simActive] = id
	s.handle(simActive, &out)
	for step := 0; step < 10000; step++ {
		if s.estab[0] && s.estab[1] && !s.discSent {
			s.discSent = true
			if err := s.tabs[s.closer].Disconnect(s.ids[s.closer], nil, &out); err != nil {
				return err
			}
			s.handle(s.closer, &out)
		}
		if len(s.queue) > 0 {
			p := s.queue[0]
			s.queue = s.queue[1:]
			if err := s.tabs[p.to].Receive(s.ips[1-p.to], p.mad[:], &out); err != nil {
				return err
			}
			s.handle(p.to, &out)
		} else {
			w0, ok0 := s.tabs[0].NextWake()
			w1, ok1 := s.tabs[1].NextWake()
			if !ok0 && !ok1 {
				return nil
			}
			if !ok0 || (ok1 && w1.Before(w0)) {
				w0 = w1
			}
			s.clock.AdvanceTo(w0)
			for i := range s.tabs {
				s.tabs[i].OnTimer(w0, &out)
				s.handle(i, &out)
			}
		}
		for i := range s.tabs {
			if err := checkInvariants(s.tabs[i]); err != nil {
				return fmt.Errorf("side %d: %w", i, err)
			}
		}
	}
	return fmt.Errorf("no end after 10000 steps")
}

// check wants each side to have connected, disconnected and left timewait.
func (s *sim) check() {
	s.t.Helper()
	want := [2][]EventKind{
		{EventEstablished, EventDisconnected, EventTimewaitExit},
		{EventConnectRequest, EventEstablished, EventDisconnected, EventTimewaitExit},
	}
	for i := range s.events {
		if !slices.Equal(s.events[i], want[i]) {
			s.t.Errorf("side %d events %v, want %v", i, s.events[i], want[i])
		}
	}
}

// IBA 12.9.3 and 12.9.6: with any of REQ, REP, RTU, DREQ or DREP lost once,
// or all of them, the two CMs still connect and disconnect: REQ, REP and
// DREQ are resent on their timers, a lost RTU is made good by the REP's
// resend (answered with the RTU again) and a lost DREP by the DREQ's.
func TestExchangeSurvivesLossOfEachMessage(t *testing.T) {
	all := []uint16{mad.AttrConnectRequest, mad.AttrConnectReply, mad.AttrReadyToUse,
		mad.AttrDisconnectRequest, mad.AttrDisconnectReply}
	cases := map[string]func(int, uint16, int) bool{"none": func(int, uint16, int) bool { return false }}
	for _, a := range all {
		cases["first "+mad.AttrName(mad.ClassCM, a)] = func(_ int, attr uint16, nth int) bool { return attr == a && nth == 1 }
		cases["three "+mad.AttrName(mad.ClassCM, a)] = func(_ int, attr uint16, nth int) bool { return attr == a && nth <= 3 }
	}
	cases["first of each"] = func(_ int, _ uint16, nth int) bool { return nth == 1 }
	for name, lose := range cases {
		for closer, who := range []string{"active", "passive"} {
			t.Run(name+", "+who+" disconnects", func(t *testing.T) {
				s := newSim(t)
				s.lose, s.closer = lose, closer
				if err := s.run(); err != nil {
					t.Fatal(err)
				}
				s.check()
			})
		}
	}
}

// Random loss and duplication, seeded: every run still connects and
// disconnects, and both tables end empty.
func TestExchangeSurvivesRandomLossAndDuplication(t *testing.T) {
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 0x636d))
		s := newSim(t)
		s.lose = func(int, uint16, int) bool { return r.IntN(100) < 30 }
		s.dup = func() bool { return r.IntN(100) < 10 }
		s.closer = int(seed % 2)
		if err := s.run(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		s.check()
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

// With every REQ lost the active side gives up after its retries (IBA
// 12.9.3) and the passive side never hears of it. With every RTU lost the
// passive side resends its REP as often as the REQ's Max CM Retries allow,
// each answered by an RTU that is lost too, then gives up; the active side
// stays established (as a kernel peer would, until its QP times out).
func TestExchangeGivesUpWhenEverythingIsLost(t *testing.T) {
	s := newSim(t)
	s.lose = func(_ int, attr uint16, _ int) bool { return attr == mad.AttrConnectRequest }
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.events[simActive], []EventKind{EventUnreachable}) || len(s.events[simPassive]) != 0 {
		t.Errorf("events %v", s.events)
	}
	if got := s.seen[mad.AttrConnectRequest]; got != 16 {
		t.Errorf("%d REQs sent, want 1 + 15 retries", got)
	}

	s = newSim(t)
	s.lose = func(_ int, attr uint16, _ int) bool { return attr == mad.AttrReadyToUse }
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.events[simPassive], []EventKind{EventConnectRequest, EventUnreachable}) {
		t.Errorf("passive events %v", s.events[simPassive])
	}
	if got := s.seen[mad.AttrConnectReply]; got != 16 {
		t.Errorf("%d REPs sent, want 1 + the REQ's 15 retries", got)
	}
}

// rping to its own address: one Table is both sides of the connection
// (the wiring loops QP1 MADs for a local GID back into the same Table).
func TestLoopbackConnectionInOneTable(t *testing.T) {
	clock := transporttest.NewManualClock()
	tb := NewTable(Config{LocalCAGUID: 7}, clock)
	_, _ = tb.Listen(ServiceID(PortSpaceTCP, 7174), activeIP)
	var out Output
	cp := rpingConnect()
	cp.Dst = netip.AddrPortFrom(activeIP, 7174)
	aid, err := tb.Connect(cp, &out)
	if err != nil {
		t.Fatal(err)
	}
	var got []EventKind
	for range 20 {
		if len(out.Sends) == 0 {
			break
		}
		var next Output
		for _, s := range out.Sends {
			if err := tb.Receive(activeIP, s.MAD[:], &next); err != nil {
				t.Fatal(err)
			}
		}
		for _, ev := range next.Events {
			got = append(got, ev.Kind)
			if ev.Kind == EventConnectRequest {
				if err := tb.Accept(ev.ID, rpingAccept(), &next); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := checkInvariants(tb); err != nil {
			t.Fatal(err)
		}
		out = next
	}
	if !slices.Equal(got, []EventKind{EventConnectRequest, EventEstablished, EventEstablished}) {
		t.Errorf("events %v", got)
	}
	c, _ := tb.Conn(aid)
	if c.State != StateEstablished || c.RemoteQPN != rpingAccept().QPN {
		t.Errorf("active side %v, remote QPN %#x", c.State, c.RemoteQPN)
	}
}
