package netstack

import "sync/atomic"

// Counters are the stack's statistics. Every field is updated atomically
// and may be read at any time.
type Counters struct {
	FramesIn  atomic.Uint64 // frames read from the link
	FramesOut atomic.Uint64 // frames written to the link
	RoCEIn    atomic.Uint64 // RoCEv2 packets delivered
	RoCEOut   atomic.Uint64 // RoCEv2 packets written to the link

	ARPRequestsIn  atomic.Uint64 // ARP requests for one of our addresses
	ARPRepliesOut  atomic.Uint64
	ARPRequestsOut atomic.Uint64 // our resolution probes (incl. gratuitous)
	ARPRepliesIn   atomic.Uint64
	NDSolicitsIn   atomic.Uint64 // neighbour solicitations for our addresses
	NDAdvertsOut   atomic.Uint64
	NDSolicitsOut  atomic.Uint64
	NDAdvertsIn    atomic.Uint64
	EchoReplies    atomic.Uint64 // ICMP and ICMPv6 echo replies sent

	NeighMisses          atomic.Uint64 // packets that found no resolved neighbour
	NeighQueueDrops      atomic.Uint64 // dropped: resolution queue or cache full
	NeighUnresolvedDrops atomic.Uint64 // dropped: neighbour never resolved

	BadIPChecksum   atomic.Uint64
	BadUDPChecksum  atomic.Uint64
	BadICMPChecksum atomic.Uint64
	ICRCErrors      atomic.Uint64 // RoCEv2 packets with a wrong ICRC (icrc_errors)
	Malformed       atomic.Uint64 // truncated or inconsistent headers
	NotForUs        atomic.Uint64 // another host's MAC or IP
	Fragments       atomic.Uint64 // IPv4 fragments (RoCEv2 is never fragmented)
	NonRoCE         atomic.Uint64 // well-formed but neither RoCEv2 nor handled control traffic
	TxErrors        atomic.Uint64 // bad Send requests and link write errors
	TxTooBig        atomic.Uint64 // packets larger than the link's MTU, dropped (also tx_errors)
	TxLinkDown      atomic.Uint64 // packets dropped because the link was down

	// Multicast (mcast.go): groups joined and left, RoCEv2 to groups not
	// joined (dropped), and the TAP-mode membership protocol's messages
	// (IGMP leaves and MLDv1 dones count as reports).
	McastJoins     atomic.Uint64
	McastLeaves    atomic.Uint64
	McastNotJoined atomic.Uint64
	IGMPReportsOut atomic.Uint64
	IGMPQueriesIn  atomic.Uint64
	MLDReportsOut  atomic.Uint64
	MLDQueriesIn   atomic.Uint64

	// Fault injection (impair.go), RoCEv2 frames in both directions.
	ImpairDropped    atomic.Uint64
	ImpairDuplicated atomic.Uint64
	ImpairCorrupted  atomic.Uint64
	ImpairReordered  atomic.Uint64
	ImpairDelayed    atomic.Uint64
}

// Each calls f with every counter's name and value, in a fixed order (for
// metrics and `vrnicctl stats`).
func (c *Counters) Each(f func(name string, v uint64)) {
	for _, x := range []struct {
		n string
		v *atomic.Uint64
	}{
		{"frames_in", &c.FramesIn}, {"frames_out", &c.FramesOut},
		{"roce_in", &c.RoCEIn}, {"roce_out", &c.RoCEOut},
		{"arp_requests_in", &c.ARPRequestsIn}, {"arp_replies_out", &c.ARPRepliesOut},
		{"arp_requests_out", &c.ARPRequestsOut}, {"arp_replies_in", &c.ARPRepliesIn},
		{"nd_solicits_in", &c.NDSolicitsIn}, {"nd_adverts_out", &c.NDAdvertsOut},
		{"nd_solicits_out", &c.NDSolicitsOut}, {"nd_adverts_in", &c.NDAdvertsIn},
		{"echo_replies", &c.EchoReplies},
		{"neigh_misses", &c.NeighMisses}, {"neigh_queue_drops", &c.NeighQueueDrops},
		{"neigh_unresolved_drops", &c.NeighUnresolvedDrops},
		{"bad_ip_checksum", &c.BadIPChecksum}, {"bad_udp_checksum", &c.BadUDPChecksum},
		{"bad_icmp_checksum", &c.BadICMPChecksum}, {"icrc_errors", &c.ICRCErrors},
		{"malformed", &c.Malformed}, {"not_for_us", &c.NotForUs},
		{"fragments", &c.Fragments}, {"non_roce", &c.NonRoCE}, {"tx_errors", &c.TxErrors},
		{"tx_too_big", &c.TxTooBig}, {"tx_link_down", &c.TxLinkDown},
		{"mcast_joins", &c.McastJoins}, {"mcast_leaves", &c.McastLeaves},
		{"mcast_not_joined", &c.McastNotJoined},
		{"igmp_reports_out", &c.IGMPReportsOut}, {"igmp_queries_in", &c.IGMPQueriesIn},
		{"mld_reports_out", &c.MLDReportsOut}, {"mld_queries_in", &c.MLDQueriesIn},
		{"impair_dropped", &c.ImpairDropped}, {"impair_duplicated", &c.ImpairDuplicated},
		{"impair_corrupted", &c.ImpairCorrupted}, {"impair_reordered", &c.ImpairReordered},
		{"impair_delayed", &c.ImpairDelayed},
	} {
		f(x.n, x.v.Load())
	}
}

// Map returns the counters by name.
func (c *Counters) Map() map[string]uint64 {
	m := map[string]uint64{}
	c.Each(func(n string, v uint64) { m[n] = v })
	return m
}
