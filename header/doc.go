// Package header holds the link- and network-level wire formats around
// RoCEv2, as gVisor's header package does: zero-allocation views over
// []byte of the Ethernet, ARP, IPv4, IPv6, UDP, ICMP and ICMPv6 headers,
// and the Internet checksum (RFC 1071) with the pseudo-header sums.
// The device's network stack (nic/netstack), its links and the test
// networks build and read frames with them; the RoCEv2 transport headers
// (BTH and the rest, ICRC, opcodes, PSNs) are package transport/wire's.
//
// A view is a []byte of at least the header's size: accessors read
// big-endian fields in place and setters write them; Encode writes a
// whole header from a Fields value. Nothing here allocates, and the
// package imports nothing of the project, so that any layer may use it.
package header
