// Package netstack is vrnicd's L2/L3 layer: it turns a link.Link into a
// RoCEv2 port. It answers what a host must answer, resolves neighbours,
// wraps outgoing transport packets in UDP/IP/Ethernet and unwraps and checks
// incoming ones.
//
// # Modes
//
// ModeTAP: the stack is a host of its own behind a TAP (or any link it owns
// alone). Its addresses come from Config.Addrs plus the EUI-64 link-local
// address of its MAC. It answers ARP requests and IPv6 neighbour
// solicitations for them (DAD probes included), ICMP and ICMPv6 echo, sends a
// gratuitous ARP / unsolicited NA per address when Run starts, and resolves
// peers with its own cache (see NeighConfig: entries expire after
// ReachableTime and are re-probed by unicast; resolution is retried
// MaxProbes times; frames wait in a bounded per-neighbour queue).
//
// ModeRaw: the kernel owns the interface and answers ARP/ND/echo itself. The
// stack takes the interface's addresses (following RTM_NEWADDR/DELADDR via
// netlink) and mirrors the kernel's neighbour table (RTM_NEWNEIGH). To
// resolve a missing neighbour it sends RTM_NEWNEIGH with NTF_USE, which makes
// the kernel solicit as for its own traffic; stale entries are re-validated
// the same way when used. It binds UDP 4791 on the interface with sockets
// whose filter drops everything, so the kernel sends no ICMP port
// unreachable while AF_PACKET still reads the frames. Use a link opened with
// link.RoCEFilter so the kernel's other traffic is never copied to us.
//
// # Wiring (for cmd/vrnicd)
//
//	l, _ := link.OpenTAP(link.TAPConfig{Name: "vrnic0", MTU: 1500})
//	gids := gid.New(l.HardwareAddr(), 0)
//	st, _ := netstack.New(netstack.Config{
//		Link:    l,
//		Mode:    netstack.ModeTAP,
//		Addrs:   []netip.Prefix{netip.MustParsePrefix("192.0.2.10/24")},
//		OnAddrs: func(a []netip.Addr) { gids.Sync(a) },
//		Deliver: dispatchByDestQP, // func([]netstack.RxPacket), on Run's goroutine
//		Tap:     pcapWriter,       // optional, *pcapfile.Writer
//	})
//	go st.Run(ctx)           // returns when ctx ends (it closes the link)
//	st.Send([]netstack.TxPacket{{Buf: b, Offset: netstack.Headroom, Dest: &dest}})
//	...
//	st.Close(); l.Close()
//
// Raw mode: link.OpenRaw(link.RawConfig{Interface: "eth1", Filter:
// link.RoCEFilter()}) and Mode: netstack.ModeRaw (Addrs unused).
//
// # Sending
//
// Send takes transport packets (BTH..ICRC) with at least Headroom bytes in
// front and a Dest, writes Ethernet/IPv4-or-IPv6/UDP into the headroom and
// the ICRC at the end, and writes batches to the link. IPv4: no options, DF,
// ID 0, UDP checksum 0, TTL and TOS from the Dest — what kernel rxe sends.
// IPv6: traffic class, flow label and hop limit from the Dest, UDP checksum
// computed (or 0 with Config.ZeroUDP6Checksum, as rxe). Send never keeps the
// caller's buffers.
//
// Sending to one of the stack's own addresses goes to the wire like any
// other packet (kernel rxe short-cuts it); loopback belongs above this layer.
//
// # Receiving
//
// Run reads batches from the link on the caller's goroutine and hands each
// batch of good RoCEv2 packets to Config.Deliver; the slices in RxPacket are
// valid until Deliver returns. Everything malformed is dropped and counted
// (Counters), never a panic: truncated frames, bad IPv4 header checksum, IPv4
// options or fragments, inconsistent lengths, bad non-zero UDP checksum, bad
// ICRC (icrc_errors), other hosts' frames, other protocols. Multicast RoCE
// (UD multicast groups) is not accepted.
package netstack
