// Package nic is the device: it joins the transport engine to a port
// (nic/netstack over a nic/link), holds the device's resource tables (QPs,
// SRQs, the memory tables of transport/mem) and runs its QPs on datapath
// workers (worker.go): a worker owns a QP outright, both sides and their
// timers, and runs it to completion; the first worker reads a pollable link
// itself. The workers are the one owner of wake-ups: each sleeps in one
// wait set holding its link and the doorbells of its QPs and SRQs
// (worker_wait.go, srq.go), with its QPs' timers as its deadline.
//
// Received RoCEv2 packets are checked as kernel rxe's ingress checks them
// (rxe_recv.c: opcode, TVer, destination QP, QP type, path addresses, P_Key);
// ingress only returns its verdict (drop, GSI, a multicast group, a QP),
// and its caller acts on it: a packet meets the engine in the link's
// buffer on the QP's own worker, or is copied into a pooled buffer for it:
// requests to the receive side, responses to the send side.
// Packets to one of the device's own GIDs never reach the wire (loopback, as
// rxe does).
package nic
