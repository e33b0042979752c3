package verbs

import "github.com/vrnic/vrnicd/verbsock/shm"

// SQRing, RQRing and CQRing expose a queue's shared memory to tests that
// play a hostile client.
func SQRing(q *QP) []byte  { return q.sqm }
func RQRing(q *QP) []byte  { return q.rqm }
func CQRing(cq *CQ) []byte { return cq.m }

// CQPending is how many completions wait in cq.
func CQPending(cq *CQ) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.r.Pending()
}

// SQPublish publishes the next SQ slot after edit has scribbled on it,
// as a hostile client would, and rings the doorbell if asked.
func SQPublish(q *QP, edit func(slot []byte)) {
	q.sqMu.Lock()
	defer q.sqMu.Unlock()
	edit(q.sq.Next())
	if q.sq.Publish() {
		q.ringBell()
	}
}

// RingBell writes q's doorbell, whatever the ring says.
func RingBell(q *QP) { q.ringBell() }

// DoorbellFD and CQEventFD are the client's ends of a QP's doorbell and a
// CQ's completion channel, for tests that abuse them.
func DoorbellFD(q *QP) int { return q.bell }
func CQEventFD(cq *CQ) int {
	if cq.ev == nil {
		return -1
	}
	rc, err := cq.ev.SyscallConn() // not Fd(): it would make the file blocking
	if err != nil {
		return -1
	}
	fd := -1
	_ = rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// SRQRing exposes an SRQ's ring; RingSRQBell writes its doorbell.
func SRQRing(s *SRQ) []byte { return s.m }
func RingSRQBell(s *SRQ)    { _ = shm.Wake(s.bell) }
