// Package transport is the RoCEv2 transport engine: the IBA RC, UC and UD
// (and GSI) services of one queue pair, in the behaviour of kernel rxe. It
// does no I/O and reads no clock of its own: packets come in as RxPacket
// values already checked by the device (nic/), go out through Env.Out, time
// comes from Env.Clock, memory is reached through the Memory view of the
// tables in transport/mem. Everything it does is therefore repeatable in a
// test that drives time by hand (transport/transporttest).
//
// # Owners
//
// A QP has two sides, each with one owner at a time, and neither touches the
// other's state: the send side (requester, completer and their timers:
// PostSend, HandleResponse, RunSend) and the receive side (responder:
// PostRecv, HandleRequest, RunRecv). The device runs both on the QP's
// datapath worker (nic/worker.go); tests may run them anywhere, one call
// at a time per side. The control plane (Modify, Query)
// publishes an immutable attribute snapshot that each owner picks up the
// next time it runs (qp.go).
//
// # Vocabulary
//
// The names a client also sees (QPType, QPState, AttrMask, QPAttr, QPCap,
// MTU, AddressVector, WROpcode, SendFlags, SGE, WC and its status, opcode
// and flags, OpcodeAllowed; mem.Access and mem.MWType; cm.State) are
// aliases of package verbsock/ibv, a leaf the client SDK shares without
// linking the engine. What only the engine needs (SendWR, RecvWR, the
// checks and the timers of the attributes) is defined here.
//
// # Files and kernel rxe's roles
//
// One file per role, as in drivers/infiniband/sw/rxe:
//
//	qp.go, attr.go     QP creation, attributes, state machine       rxe_qp.c, rxe_verbs.c (modify_qp checks)
//	types.go, env.go   work requests, the engine's environment      rxe_verbs.h, rxe_loc.h
//	sq.go              send queue: state, post_send, completion     rxe_verbs.c (post_send), rxe_comp.c (do_complete)
//	req.go             requester: WQE start, request packets        rxe_req.c
//	comp.go            completer: ACK, NAK, READ/atomic responses   rxe_comp.c
//	timers.go          retransmit and RNR timers, retry             rxe_comp.c (retransmit_timer), rxe_req.c (rnr_nak_timer, req_retry)
//	rq.go              receive queue: state, post_recv, dispatch    rxe_verbs.c (post_recv), rxe_resp.c (get_srq_wqe)
//	resp.go            RC responder: checks, execution, duplicates  rxe_resp.c
//	place.go           SEND and WRITE placement, RC and UC          rxe_resp.c (send_data_in, write_data_in)
//	resp_ack.go        ACK/NAK, atomic ACK, READ responses          rxe_resp.c (send_ack, read_reply)
//	resp_ucud.go       UC and UD receive                            rxe_resp.c
//	srq.go, cq.go      shared receive queue, in-memory CQ           rxe_srq.c, rxe_cq.c
//	sgl.go, memory.go  SGE resolution and copies                    rxe_mr.c (copy_data)
//	closed.go          what a destroyed RC QP still answers         no rxe counterpart
//	counters.go        per-QP and device counters                   rxe_hw_counters.c
//
// Packet validation on ingress (rxe_recv.c) is the device's (nic/), wire
// formats and the ICRC (rxe_hdr.h, rxe_opcode.c, rxe_icrc.c) are
// transport/wire's, memory regions and windows (rxe_mr.c, rxe_mw.c)
// transport/mem's, connection management transport/cm's.
package transport
