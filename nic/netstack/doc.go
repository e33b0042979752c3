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
// ICRC (icrc_errors), other hosts' frames, other protocols.
//
// # Multicast
//
// JoinGroup and LeaveGroup (mcast.go) keep the port's IP multicast groups,
// for UD multicast: RoCEv2 to a joined IPv4 or IPv6 group is delivered as
// unicast RoCE is (RxPacket.Dst is the group), to a group not joined it is
// dropped and counted (mcast_not_joined). Config.MaxGroups bounds the
// table (8192 by default, kernel rxe's max_mcast_grp). Sending to a group
// needs nothing: Send maps it to its Ethernet address.
//
// Raw mode: the kernel joins, on IP sockets of the interface's namespace
// (IP_ADD_MEMBERSHIP / IPV6_JOIN_GROUP; a new socket whenever one is full,
// past net.ipv4.igmp_max_memberships). It sends the IGMP/MLD reports,
// answers queries, opens the interface's MAC filter, and leaves when the
// sockets close (LeaveGroup, Close, or the daemon's death).
//
// TAP mode: the stack is the host, so it speaks IGMPv3 (RFC 3376) and
// MLDv2 (RFC 3810) itself: a join or leave is reported at once and once
// more within the Unsolicited Report Interval (1 s); general and
// group-specific queries are answered at a random point within their Max
// Resp Time; an IGMPv2 or MLDv1 querier makes it speak IGMPv2 / MLDv1
// (reports to the group, leaves to all-routers), an IGMPv1 querier IGMPv1
// (reports only), until the Older Version Querier Present Timeout (260 s)
// passes. Reports carry the Router Alert
// (IPv4 option; IPv6 Hop-by-Hop) and TTL/hop limit 1; MLD goes from the
// link-local address. 224.0.0.0/24, ff02::1 and interface-local groups are
// never reported. Groups are reported again when SetLinkUp brings the link
// back; Close sends a leave for those still joined. Counters: mcast_joins, mcast_leaves, igmp_reports_out,
// igmp_queries_in, mld_reports_out, mld_queries_in (leaves count as
// reports); malformed queries count as malformed.
package netstack
