// Package verbsock is the client protocol of vrnicd: how a client process
// reaches the daemon's RDMA device, the way libibverbs reaches a kernel
// driver through uverbs.
//
// The Unix socket (SOCK_SEQPACKET) carries control only: a version
// handshake, then length-framed binary requests and replies with
// errno-style status, file descriptors passed with SCM_RIGHTS. The data
// path never touches it: memory regions are sealed memfds the client
// allocates and the daemon maps (package shm), and the send, receive and
// completion queues are single-producer/single-consumer rings in shared
// memory (package ring), with socketpair wake-up channels for the doorbell and for completion
// events. PROTOCOL.md documents the wire format and the ring layouts.
//
// Subpackages:
//
//	verbsock        frames, operations, payload structs (this package)
//	verbsock/shm    sealed memfds, the daemon's checked mappings, wake-up channels
//	verbsock/ring   ring layouts; the daemon and client ends of every queue
//	verbsock/server the daemon side: serves connections over a Device
//	verbsock/verbs  the Go SDK clients import
package verbsock
