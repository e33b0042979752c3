package main

import (
	"flag"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/docgen"
)

// docPage is vrnicd(8), from the flag set parseArgs defines and the
// option texts of --help (usageText).
func docPage() *docgen.Page {
	o, _ := parseArgs(nil)
	var flags []docgen.Flag
	o.fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "h" {
			return
		}
		arg, help := docgen.FromHelp(usageText, 0, f.Name)
		flags = append(flags, docgen.Flag{Long: f.Name, Arg: arg, Help: help})
	})
	docgen.SortFlags(flags)
	paras := strings.Split(strings.TrimSpace(usageText), "\n\n")
	var signals []string
	for _, p := range paras {
		if s, ok := strings.CutPrefix(p, "Signals: "); ok {
			signals = append(signals, strings.Join(strings.Fields(s), " "))
		}
	}
	return &docgen.Page{
		Name: "vrnicd", Section: 8,
		Summary:  "user-space RoCEv2 RDMA NIC",
		Synopsis: []string{"--iface tap:NAME|IFACE [options]"},
		Description: []string{
			strings.Join(strings.Fields(paras[1]), " "),
			"With --iface tap:NAME vrnicd creates the TAP device NAME and is the host on its far side, with its own MAC (--mac) and addresses (--ip); this needs CAP_NET_ADMIN. With --iface IFACE it runs in raw mode on an existing Ethernet interface (AF_PACKET), with that interface's MAC, MTU and addresses, followed as they change; this needs CAP_NET_RAW and CAP_NET_ADMIN.",
			"Flags override the TOML configuration file (--config); vrnicctl(1) shows the device, its counters and QPs and captures its traffic live; --metrics serves the counters to Prometheus.",
		},
		Flags: flags,
		Extra: []docgen.Section{
			{Title: "SIGNALS", Paragraphs: signals},
			{Title: "FILES", Paragraphs: []string{
				"/etc/vrnicd/vrnicd.toml: the configuration file the systemd unit passes (--config); every key is documented in the installed example.",
				defaultSocket + ": the client socket by default.",
			}},
			{Title: "THE LINK", Paragraphs: []string{
				"The port's state is the interface's, as kernel rxe's is: administratively down or without carrier it is DOWN (physical state DISABLED or POLLING) and clients get the PORT_ERR event; up again it is ACTIVE and they get PORT_ACTIVE. QPs live through an outage: an RC requester retransmits on its own timer and retry count and fails with RETRY_EXC_ERR only if the outage outlasts them; UD sends meanwhile are dropped and counted. The daemon keeps serving its socket and never exits because its link went down.",
				"The interface's MTU is followed: the port's active MTU becomes the largest of 256..4096 that fits, for QPs modified from then on. A QP whose path MTU no longer fits has its packets dropped at the port, counted (tx_too_big) and logged once for the QP, as kernel rxe's IP layer drops them; an RC QP then ends in RETRY_EXC_ERR.",
				"The interface being deleted (or moved to another namespace) loses the device: clients get DEVICE_FATAL, every QP goes to the error state with its work requests flushed, and vrnicd exits 1 with one log line. The vrnicd@.service unit is bound to the interface's device unit (BindsTo=), so it stops with it and starts again with it.",
			}},
			{Title: "EXAMPLES", Paragraphs: []string{
				"vrnicd --iface eth1: raw mode on eth1, with its MAC, MTU and addresses (its 192.0.2.1/24 gives the port the IPv4-mapped GID of 192.0.2.1); clients open the device vrnic0 on " + defaultSocket + ", which vrnicctl devinfo shows.",
				"systemctl start vrnicd@eth1: the same under systemd, as the user vrnicd with CAP_NET_RAW and CAP_NET_ADMIN only, the socket /run/vrnicd/eth1.sock and the optional configuration /etc/vrnicd/eth1.toml; systemctl enable vrnicd@eth1 starts it whenever eth1 appears.",
				"vrnicd --iface tap:vrtap0 --ip 192.0.2.10/24 --mtu 9000: TAP mode: vrnicd creates the TAP vrtap0 and is the host 192.0.2.10 on its far side; the kernel's end joins a network like any interface (ip link set vrtap0 master br0, with br0 on 192.0.2.0/24).",
				"vrnicd --iface eth1 --metrics 127.0.0.1:9464 --workers 2 --pcap /var/log/vrnicd/eth1.pcap: raw mode with Prometheus metrics on http://127.0.0.1:9464/metrics, two datapath workers, and every RoCEv2 frame written to a pcap file (SIGHUP reopens it).",
			}},
			{Title: "EXIT STATUS", Paragraphs: []string{"0 after SIGTERM or SIGINT; 1 on a runtime failure (interface, privileges, socket in use, the interface deleted); 2 for a bad command line or configuration, which a restart will not fix. A link that goes down is not a failure."}},
		},
		SeeAlso: []string{"vrnicctl(1)", "vrnic-perf(1)", "vrnic-pingpong(1)", "systemd.service(5)"},
	}
}
