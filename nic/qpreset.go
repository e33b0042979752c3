package nic

// Discarder is a SendSource or RecvSource that can drop everything its
// client posted and hand every slot back (wq.SendQueue, wq.RecvQueue).
type Discarder interface {
	Discard()
}

// DiscardPosted empties the QP's send and receive sources, on the QP's
// worker, after a modify to RESET: IBA 10.3.1 has RESET empty the
// work queues without completions, and the engine drops what it holds, but
// WQEs still in a client's ring would otherwise be executed after the next
// INIT, and the slots of those the engine dropped would stay taken (every
// post ENOMEM). It waits for the worker; it must not run on it.
func (q *QP) DiscardPosted() error {
	if d, ok := q.sq.(Discarder); ok {
		if err := q.post(true, func() error { d.Discard(); return nil }); err != nil {
			return err
		}
	}
	if d, ok := q.rq.(Discarder); ok {
		if err := q.post(false, func() error { d.Discard(); return nil }); err != nil {
			return err
		}
	}
	return nil
}
