// Package nic is the device: it joins the transport engine to a port
// (nic/netstack over a nic/link), holds the device's resource tables (QPs,
// SRQs, the memory tables of transport/mem) and runs one goroutine for each
// side of every QP.
//
// Received RoCEv2 packets are checked as kernel rxe's ingress checks them
// (rxe_recv.c: opcode, TVer, destination QP, QP type, path addresses, P_Key),
// copied into pooled buffers and handed to the owner of the QP side they
// belong to: requests to the receive owner, responses to the send owner.
// Packets to one of the device's own GIDs never reach the wire (loopback, as
// rxe does).
package nic
