// Package cm is the InfiniBand Communication Manager of IBA vol 1 ch. 12 as
// rdma_cm uses it over RoCEv2, so kernel rdma_cm peers (rping, ucmatose,
// udaddy, rdma_server) can connect to vrnicd's QPs and vrnicd's to theirs.
// It is pure: no goroutines, no sockets, time from an injected Clock. The
// caller hands it the MADs QP1 receives (Table.Receive) and the consumer's
// calls (Listen, Connect, Accept, Reject, SendMRA, Disconnect, ResolveSIDR,
// AnswerSIDR), asks NextWake when to call OnTimer, and does what the Output
// says: QP transitions first, then the MADs to send, then the events.
//
// Files by role, after the kernel's split between ib_cm (cm.c, the IBA
// protocol) and rdma_cm (cma.c, IP addressing on top of it):
//
//   - conn.go: the per-connection state machine of IBA 12.9 (states of
//     Figure 160 / enum ib_cm_state), the handlers of REP, RTU, MRA, REJ,
//     DREQ and DREP in an existing connection, retransmission and giving up
//     (12.9.3), timewait (12.9.8.6). cm.c's cm_rep_handler, cm_rtu_handler,
//     cm_mra_handler, cm_rej_handler, cm_dreq_handler, cm_drep_handler,
//     cm_process_send_error, cm_enter_timewait.
//   - passive.go: REQ reception (12.9.6.1: duplicate, stale connection
//     12.9.8.3.1, no listener, invalid MTU or transport type, no resources),
//     Accept (REP), Reject (REJ), SendMRA (12.6.6). cm.c cm_req_handler,
//     cm_dup_req_handler, ib_send_cm_rep, ib_send_cm_rej, ib_send_cm_mra;
//     cma.c cma_req_handler, cma_accept_ib.
//   - active.go: Connect (REQ), Disconnect (DREQ/DREP, or REJ of an
//     unfinished exchange). cm.c ib_send_cm_req, ib_send_cm_dreq,
//     ib_send_cm_drep, cm_destroy_id; cma.c cma_connect_ib, rdma_disconnect.
//   - sidr.go: Service ID Resolution for UD (12.11). cm.c
//     cm_sidr_req_handler, cm_sidr_rep_handler; cma.c cma_resolve_ib_udp.
//   - table.go: the bounded table of connections and its indexes (local
//     comm ID; remote comm ID + CA GUID for duplicates; remote QPN + GID
//     for stale connections; SIDR request ID + peer), listeners, MAD
//     dispatch, counters. cm.c's cm.local_id_table, remote_id_table,
//     remote_qp_table, remote_sidr_table, listen_service_table.
//   - timers.go: IBA's 4.096 µs × 2^x times, the kernel's cm_convert_to_ms
//     and cm_ack_timeout, the deadline heap behind NextWake/OnTimer.
//   - addr.go: rdma_cm's addressing (cma.c): service IDs (port space << 16
//     | port), the cma_hdr at the front of REQ and SIDR_REQ private data,
//     GIDs from IP addresses, the RoCE path made up without an SA, the flow
//     label and the UDP source port it gives.
//   - events.go: what the caller gets back (Output, Event, QPModify).
//
// The wire encoding of the MADs is package mad's
// (transport/wire/rocelayers/mad).
//
// Bounds: a Table holds at most Config.MaxConns connections of any state,
// of which at most Config.MaxHalfOpen passive ones not yet established; a
// REQ past either is answered REJ "no resources" (reason 3) or dropped
// (Config.DropWhenFull) and counted, and established connections are never
// evicted. A passive request the consumer never answers is forgotten when
// the active side's retries would have run out. Timewait lasts the QP's
// ACK timeout as the kernel's does.
//
// A QP is held from Connect or Accept until EventTimewaitExit: Connect and
// Accept refuse a QPN a connection still holds (ErrQPInUse), and a REQ from
// a peer QP that still has a connection here, timewait included, is
// rejected "stale connection" (reason 10) and the old connection is
// disconnected.
//
// Choices where IBA leaves room, and how they relate to the kernel: a
// duplicate REQ in REP_SENT is answered with the REP again (the kernel
// drops it and relies on the REP timer); a duplicate REQ not yet answered
// by the consumer gets an MRA (rdma_cm's delayed MRA, Config.NoLazyMRA to
// turn it off); a duplicate REQ of an established
// connection is dropped as the kernel drops it (a late copy: answering it
// "stale" would tear down a good connection); a DREQ received is answered
// only when the consumer calls Disconnect, as rdma_cm's is; a DREQ for no
// connection gets a DREP (cm_issue_drep); the active side answers a REP
// with the RTU at once, so it never sends an MRA for a REP (MRA_REP_SENT
// is never entered). LAP and APR (alternate paths) are not handled: RoCE
// rdma_cm does not send them; they are counted as decode errors.
//
// Timing follows kernel 6.1 as the golden capture shows it: CM response
// timeouts 20 (4.3 s), 15 retries, packet life time 18 (so Local ACK
// Timeout 19 with rxe's CA ACK delay 15); all in Config.
package cm
