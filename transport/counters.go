package transport

import "sync/atomic"

// Counter names one counter. Names are kernel rxe's where rxe has the
// counter (rxe_hw_counters.c), ours otherwise.
type Counter int

const (
	SentPkts              Counter = iota // sent_pkts
	RcvdPkts                             // rcvd_pkts
	DuplicateRequest                     // duplicate_request
	OutOfSeqRequest                      // out_of_seq_request
	RcvdRNRErr                           // rcvd_rnr_err: RNR NAKs received
	SendRNRErr                           // send_rnr_err: RNR NAKs sent
	RcvdSeqErr                           // rcvd_seq_err: PSN sequence NAKs received
	RetryExceededErr                     // retry_exceeded_err
	RetryRNRExceededErr                  // retry_rnr_exceeded_err
	CompleterRetryErr                    // completer_retry_err: retries the completer started
	SendErr                              // send_err: requests that completed in error
	RetransmitTimeouts                   // retransmit_timeouts: timer expiries with a PSN outstanding (a retry, or retry_exceeded_err)
	RetransmittedPkts                    // retransmitted_pkts
	LocalOpsExecuted                     // local_ops_executed: REG_MR, LOCAL_INV, BIND_MW run
	LocalOpReplays                       // local_op_replays: a local op reached a second time (must stay 0)
	MRChangedUnderUnacked                // mr_changed_under_unacked_wqe
	ICRCErrors                           // icrc_errors (counted by the link layer)
	RcvdDropped                          // rcvd_dropped: packets dropped (bad Q_Key, no WQE on UD, UC gap, ...)
	NAKsSent                             // naks_sent
	ClosedQPAcks                         // closed_qp_acks: duplicates a destroyed QP acknowledged again (ClosedQP)
	TLPProbes                            // tlp_probes: early retransmissions of the oldest unacknowledged packet (tlp.go)
	TLPSpurious                          // tlp_spurious: probes answered past their PSN (the responder had the probed packet and later ones)
	numCounters
)

var counterNames = [numCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err",
	"rcvd_seq_err", "retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err", "send_err",
	"retransmit_timeouts", "retransmitted_pkts", "local_ops_executed", "local_op_replays",
	"mr_changed_under_unacked_wqe", "icrc_errors", "rcvd_dropped", "naks_sent",
	"closed_qp_acks", "tlp_probes", "tlp_spurious",
}

func (c Counter) String() string { return counterNames[c] }

// CounterNames lists every counter's name in display order.
func CounterNames() []string { return append([]string(nil), counterNames[:]...) }

// Counters of one QP or of the whole device; safe to read from any goroutine.
type Counters struct {
	v [numCounters]atomic.Uint64
}

// Get returns one counter.
func (c *Counters) Get(k Counter) uint64 { return c.v[k].Load() }

// Inc adds 1 to a counter.
func (c *Counters) Inc(k Counter) { c.v[k].Add(1) }

// Snapshot returns every counter by name.
func (c *Counters) Snapshot() map[string]uint64 {
	m := make(map[string]uint64, numCounters)
	for i := range c.v {
		m[counterNames[i]] = c.v[i].Load()
	}
	return m
}

// Add adds every counter of o into c (a device keeps destroyed QPs' totals).
func (c *Counters) Add(o *Counters) {
	for i := range c.v {
		c.v[i].Add(o.v[i].Load())
	}
}
