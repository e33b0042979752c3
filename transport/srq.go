package transport

import (
	"fmt"
	"sync"

	"github.com/vrnic/vrnicd/transport/mem"
)

// SRQ is a shared receive queue. Its consumer side is shared by the
// receive owners of every QP attached to it, so it locks.
type SRQ struct {
	mu      sync.Mutex
	pd      mem.PD
	ring    []RecvWR
	sgl     [][]SGE
	head    uint64
	tail    uint64
	maxWR   uint32
	maxSGE  uint32
	limit   uint32 // armed limit, 0 = not armed
	onLimit func()
	onTake  func()
	srqn    uint32
}

// NewSRQ creates an SRQ of maxWR entries of up to maxSGE SGEs; onLimit is
// called (once per arming) when the number of posted WQEs drops below the
// limit set by Modify.
func NewSRQ(srqn uint32, pd mem.PD, maxWR, maxSGE uint32, onLimit func()) (*SRQ, error) {
	if maxWR == 0 || maxSGE == 0 {
		return nil, fmt.Errorf("%w: SRQ with max_wr %d max_sge %d", ErrInvalid, maxWR, maxSGE)
	}
	s := &SRQ{pd: pd, maxWR: maxWR, maxSGE: maxSGE, onLimit: onLimit, srqn: srqn}
	s.alloc(maxWR)
	return s, nil
}

func (s *SRQ) alloc(maxWR uint32) {
	n := uint64(1)
	for n < uint64(maxWR) {
		n <<= 1
	}
	ring := make([]RecvWR, n)
	sgl := make([][]SGE, n)
	buf := make([]SGE, int(n)*int(s.maxSGE))
	k := int(s.maxSGE)
	for i := range sgl {
		sgl[i] = buf[i*k : (i+1)*k : (i+1)*k]
	}
	// Keep what is posted, in order.
	var j uint64
	for i := s.head; i < s.tail; i, j = i+1, j+1 {
		old := s.ring[i&uint64(len(s.ring)-1)]
		ring[j] = RecvWR{ID: old.ID, SGL: append(sgl[j][:0], old.SGL...), Fault: old.Fault}
	}
	s.ring, s.sgl = ring, sgl
	s.tail, s.head = j, 0
	s.maxWR = maxWR
}

// OnTake sets a function called each time a QP takes a WQE, after the SRQ
// has let go of it (Len already counts it out), on that QP's receive
// owner. The SRQ's producer frees the WQE's slot there: ibv_post_srq_recv
// counts WRs not yet taken, as rxe's queue does. Set it before a QP can
// use the SRQ.
func (s *SRQ) OnTake(f func()) { s.onTake = f }

// SRQN is the SRQ's number.
func (s *SRQ) SRQN() uint32 { return s.srqn }

// PD is the SRQ's protection domain.
func (s *SRQ) PD() mem.PD { return s.pd }

// Post queues a receive WQE (ibv_post_srq_recv).
func (s *SRQ) Post(wr *RecvWR) error {
	if uint32(len(wr.SGL)) > s.maxSGE && wr.Fault == WCSuccess {
		return fmt.Errorf("%w: %d SGEs, SRQ max_sge is %d", ErrInvalid, len(wr.SGL), s.maxSGE)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tail-s.head >= uint64(s.maxWR) {
		return ErrFull
	}
	i := s.tail & uint64(len(s.ring)-1)
	sgl := s.sgl[i][:0]
	if len(wr.SGL) <= cap(sgl) {
		sgl = append(sgl, wr.SGL...)
	}
	s.ring[i] = RecvWR{ID: wr.ID, SGL: sgl, Fault: wr.Fault}
	s.tail++
	return nil
}

// Attr returns max_wr, max_sge and the armed limit (ibv_query_srq).
func (s *SRQ) Attr() (maxWR, maxSGE, limit uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxWR, s.maxSGE, s.limit
}

// Len is the number of posted WQEs.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.tail - s.head)
}

// Modify resizes the SRQ (maxWR > 0) and/or arms the limit (limit > 0),
// as ibv_modify_srq with IBV_SRQ_MAX_WR / IBV_SRQ_LIMIT.
func (s *SRQ) Modify(maxWR uint32, setMax bool, limit uint32, setLimit bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if setMax {
		if maxWR == 0 || uint64(maxWR) < s.tail-s.head {
			return fmt.Errorf("%w: SRQ max_wr %d below the %d WQEs posted", ErrInvalid, maxWR, s.tail-s.head)
		}
		s.alloc(maxWR)
	}
	if setLimit {
		if limit > s.maxWR {
			return fmt.Errorf("%w: SRQ limit %d above max_wr %d", ErrInvalid, limit, s.maxWR)
		}
		s.limit = limit
	}
	return nil
}

// pop takes the oldest WQE. The returned SGL stays valid until the slot is
// posted again, which cannot happen before the caller is done with it only
// if the caller copies; popRecv copies it into the QP's current WQE.
func (s *SRQ) pop() (RecvWR, bool) {
	s.mu.Lock()
	if s.head == s.tail {
		s.mu.Unlock()
		return RecvWR{}, false
	}
	i := s.head & uint64(len(s.ring)-1)
	wr := RecvWR{ID: s.ring[i].ID, SGL: append([]SGE(nil), s.ring[i].SGL...), Fault: s.ring[i].Fault}
	s.head++
	fire := s.limit > 0 && s.tail-s.head < uint64(s.limit)
	if fire {
		s.limit = 0 // one event per arming (IBA 10.2.9.3)
	}
	s.mu.Unlock()
	if s.onTake != nil {
		s.onTake()
	}
	if fire && s.onLimit != nil {
		s.onLimit()
	}
	return wr, true
}
