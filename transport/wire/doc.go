// Package wire holds the RoCEv2 transport wire formats: zero-allocation header
// views over []byte (BTH and every extension header), the opcode table, 24-bit
// PSN arithmetic and the ICRC. The link and IP headers around them (Ethernet,
// ARP, IPv4, IPv6, UDP, ICMP) and the Internet checksum are package header's.
//
// The views follow gVisor's header package: a view is a []byte of at least the
// header's size, accessors read big-endian fields in place and setters write
// them. Nothing here allocates on the hot path; the gopacket layers in package
// rocelayers serve tools and tests.
package wire
