package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// socketFlag is --socket; its default is $VRNICD_SOCKET, else the
// daemon's default path.
func socketFlag(fs *flag.FlagSet) *string {
	return fs.String("socket", verbs.SocketPath(), "the daemon's client socket `PATH`; $"+verbs.SocketEnv+" overrides the default")
}

// openDevice connects to the daemon.
func openDevice(path string) (*verbs.Device, error) {
	d, err := verbs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot reach vrnicd at %s: %w", path, err)
	}
	return d, nil
}

// withDevice adds --socket to fs and makes the command's run: connect to
// the daemon, run f on its device, disconnect.
func withDevice(fs *flag.FlagSet, f func(d *verbs.Device, stdout io.Writer) error) runFunc {
	return withDeviceArgs(fs, func(d *verbs.Device, _ []string, stdout io.Writer) error { return f(d, stdout) })
}

// withDeviceArgs is withDevice for a command with positional arguments.
func withDeviceArgs(fs *flag.FlagSet, f func(d *verbs.Device, args []string, stdout io.Writer) error) runFunc {
	sock := socketFlag(fs)
	return func(args []string, stdout, _ io.Writer) error {
		d, err := openDevice(*sock)
		if err != nil {
			return err
		}
		defer d.Close()
		return f(d, args, stdout)
	}
}

func init() {
	register(&command{
		Name:    "devinfo",
		Args:    "[--json] [--socket PATH]",
		Summary: "print the device and port attributes and the GID table, laid out as ibv_devinfo -v, then what rdma link show adds: the netdev and mode, and the daemon's version and uptime",
		NArgs:   0,
		Setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, `print one JSON object: {"hca_id": NAME, "node_guid": "...", ..., "netdev": "eth1", "mode": "raw", "version": "...", "uptime_s": N, "ports": [{"port": 1, "state": "PORT_ACTIVE", ..., "gids": [{"index": 0, "gid": "fe80::...", "type": "RoCE v2"}]}]}`)
			return withDevice(fs, func(d *verbs.Device, w io.Writer) error {
				if *asJSON {
					return devinfoJSON(d, w)
				}
				return devinfo(d, w)
			})
		},
	})
}

// ibv_device_cap_flags names, in the order ibv_devinfo prints them.
var deviceCapNames = []struct {
	bit  uint32
	name string
}{
	{1 << 0, "RESIZE_MAX_WR"}, {1 << 1, "BAD_PKEY_CNTR"}, {1 << 2, "BAD_QKEY_CNTR"}, {1 << 3, "RAW_MULTI"},
	{1 << 4, "AUTO_PATH_MIG"}, {1 << 5, "CHANGE_PHY_PORT"}, {1 << 6, "UD_AV_PORT_ENFORCE"},
	{1 << 7, "CURR_QP_STATE_MOD"}, {1 << 8, "SHUTDOWN_PORT"}, {1 << 9, "INIT_TYPE"},
	{1 << 10, "PORT_ACTIVE_EVENT"}, {1 << 11, "SYS_IMAGE_GUID"}, {1 << 12, "RC_RNR_NAK_GEN"},
	{1 << 13, "SRQ_RESIZE"}, {1 << 14, "N_NOTIFY_CQ"}, {1 << 17, "MEM_WINDOW"}, {1 << 18, "UD_IP_CSUM"},
	{1 << 20, "XRC"}, {1 << 21, "MEM_MGT_EXTENSIONS"}, {1 << 23, "MEM_WINDOW_TYPE_2A"},
	{1 << 24, "MEM_WINDOW_TYPE_2B"}, {1 << 25, "RC_IP_CSUM"}, {1 << 26, "RAW_IP_CSUM"},
	{1 << 29, "MANAGED_FLOW_STEERING"},
}

func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

func atomicCapString(c uint32) string {
	switch c {
	case 0:
		return "ATOMIC_NONE"
	case 1:
		return "ATOMIC_HCA"
	case 2:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

func portStateString(s uint32) string {
	switch s {
	case 1:
		return "PORT_DOWN"
	case 2:
		return "PORT_INIT"
	case 3:
		return "PORT_ARMED"
	case 4:
		return "PORT_ACTIVE"
	}
	return "invalid state"
}

func mtuString(m uint32) string {
	if b := verbs.MTU(m).Bytes(); b != 0 {
		return fmt.Sprint(b)
	}
	return "invalid MTU"
}

func linkLayerString(l uint32) string {
	switch l {
	case 0, 1:
		return "InfiniBand"
	case 2:
		return "Ethernet"
	}
	return "Unknown"
}

func physStateString(s uint32) string {
	names := []string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINNING", 5: "LINK_UP",
		6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}
	if int(s) < len(names) && names[s] != "" {
		return names[s]
	}
	return "invalid physical state"
}

// Port attributes vrnicd's protocol does not carry; these are kernel
// rxe's (max_vl_num RXE_PORT_MAX_VL_NUM, no subnet manager), and the width
// and speed rxe derives for an Ethernet link of 1 Gb/s or of unknown
// speed, as a TAP device is.
const (
	portMaxVLNum   = 1 // "1"
	portWidth      = 1 // 1X
	portSpeed      = 1 // 2.5 Gbps
	numCompVectors = 1
)

// devinfo prints what ibv_devinfo -v prints for the device, in the same
// layout (rdma-core libibverbs/examples/devinfo.c): the transport is
// InfiniBand, as for every RoCE device, attributes vrnicd does not have
// (multicast, EE, raw QPs, ODP, TSO, RSS, tag matching) are zero or "not
// supported", and the GID table lists the slots in use.
func devinfo(d *verbs.Device, w io.Writer) error {
	a, err := d.Query()
	if err != nil {
		return err
	}
	b := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("hca_id:\t%s\n", d.Name())
	p("\ttransport:\t\t\t%s (%d)\n", "InfiniBand", 0)
	if a.FWVer != "" {
		p("\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	}
	p("\tnode_guid:\t\t\t%s\n", guidString(a.NodeGUID))
	p("\tsys_image_guid:\t\t\t%s\n", guidString(a.SysImageGUID))
	p("\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	p("\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	p("\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	p("\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	p("\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
	p("\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
	p("\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
	p("\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
	p("\tdevice_cap_flags:\t\t0x%08x\n", a.DeviceCapFlags)
	known := uint32(0)
	for _, f := range deviceCapNames {
		known |= f.bit
		if a.DeviceCapFlags&f.bit != 0 {
			p("\t\t\t\t\t%s\n", f.name)
		}
	}
	if u := a.DeviceCapFlags &^ known; u != 0 {
		p("\t\t\t\t\tUnknown flags: 0x%X\n", u)
	}
	p("\tmax_sge:\t\t\t%d\n", a.MaxSGE)
	p("\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERd)
	p("\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
	p("\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
	p("\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
	p("\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
	p("\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
	p("\tmax_ee_rd_atom:\t\t\t%d\n", 0)
	p("\tmax_res_rd_atom:\t\t%d\n", a.MaxResRdAtom)
	p("\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
	p("\tmax_ee_init_rd_atom:\t\t%d\n", 0)
	p("\tatomic_cap:\t\t\t%s (%d)\n", atomicCapString(a.AtomicCap), a.AtomicCap)
	p("\tmax_ee:\t\t\t\t%d\n", 0)
	p("\tmax_rdd:\t\t\t%d\n", 0)
	p("\tmax_mw:\t\t\t\t%d\n", a.MaxMW)
	p("\tmax_raw_ipv6_qp:\t\t%d\n", 0)
	p("\tmax_raw_ethy_qp:\t\t%d\n", 0)
	p("\tmax_mcast_grp:\t\t\t%d\n", a.MaxMcastGrp)
	p("\tmax_mcast_qp_attach:\t\t%d\n", a.MaxMcastQPAttach)
	p("\tmax_total_mcast_qp_attach:\t%d\n", a.MaxTotalMcastQPAttach)
	p("\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
	p("\tmax_fmr:\t\t\t%d\n", 0)
	p("\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
	if a.MaxSRQ != 0 {
		p("\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
		p("\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
	}
	p("\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
	p("\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)
	p("\tgeneral_odp_caps:\n")
	for _, t := range []string{"rc", "uc", "ud", "xrc"} {
		p("\t%s_odp_caps:\n\t\t\t\t\tNO SUPPORT\n", t)
	}
	p("\tcompletion_timestamp_mask not supported\n")
	p("\tcore clock not supported\n")
	p("\tdevice_cap_flags_ex:\t\t0x%X\n", uint64(a.DeviceCapFlags)) // no flags above bit 31
	p("\ttso_caps:\n\t\tmax_tso:\t\t\t0\n")
	p("\trss_caps:\n")
	p("\t\tmax_rwq_indirection_tables:\t\t\t0\n")
	p("\t\tmax_rwq_indirection_table_size:\t\t\t0\n")
	p("\t\trx_hash_function:\t\t\t\t0x0\n")
	p("\t\trx_hash_fields_mask:\t\t\t\t0x0\n")
	p("\tmax_wq_type_rq:\t\t\t0\n")
	p("\tpacket_pacing_caps:\n\t\tqp_rate_limit_min:\t0kbps\n\t\tqp_rate_limit_max:\t0kbps\n")
	p("\ttag matching not supported\n")
	p("\tnum_comp_vectors:\t\t%d\n", numCompVectors)

	for port := uint8(1); uint32(port) <= a.PhysPortCnt; port++ {
		pa, err := d.QueryPort(port)
		if err != nil {
			return err
		}
		p("\t\tport:\t%d\n", port)
		p("\t\t\tstate:\t\t\t%s (%d)\n", portStateString(pa.State), pa.State)
		p("\t\t\tmax_mtu:\t\t%s (%d)\n", mtuString(pa.MaxMTU), pa.MaxMTU)
		p("\t\t\tactive_mtu:\t\t%s (%d)\n", mtuString(pa.ActiveMTU), pa.ActiveMTU)
		p("\t\t\tsm_lid:\t\t\t%d\n", 0)
		p("\t\t\tport_lid:\t\t%d\n", 0)
		p("\t\t\tport_lmc:\t\t0x%02x\n", 0)
		p("\t\t\tlink_layer:\t\t%s\n", linkLayerString(pa.LinkLayer))
		p("\t\t\tmax_msg_sz:\t\t0x%x\n", pa.MaxMsgSize)
		p("\t\t\tport_cap_flags:\t\t0x%08x\n", pa.PortCapFlags)
		p("\t\t\tport_cap_flags2:\t0x%04x\n", 0)
		p("\t\t\tmax_vl_num:\t\t%d (%d)\n", portMaxVLNum, portMaxVLNum)
		p("\t\t\tbad_pkey_cntr:\t\t0x%x\n", 0)
		p("\t\t\tqkey_viol_cntr:\t\t0x%x\n", 0)
		p("\t\t\tsm_sl:\t\t\t%d\n", 0)
		p("\t\t\tpkey_tbl_len:\t\t%d\n", pa.PKeyTblLen)
		p("\t\t\tgid_tbl_len:\t\t%d\n", pa.GIDTblLen)
		p("\t\t\tsubnet_timeout:\t\t%d\n", 0)
		p("\t\t\tinit_type_reply:\t%d\n", 0)
		p("\t\t\tactive_width:\t\t%dX (%d)\n", 1, portWidth)
		p("\t\t\tactive_speed:\t\t%s (%d)\n", "2.5 Gbps", portSpeed)
		p("\t\t\tphys_state:\t\t%s (%d)\n", physStateString(pa.PhysState), pa.PhysState)
		for i := range int(pa.GIDTblLen) {
			g, err := d.QueryGID(port, i)
			if err != nil {
				return fmt.Errorf("GID %d of port %d: %w", i, port, err)
			}
			if nullGID(g) {
				continue
			}
			// inet_ntop's form; vrnicd's GIDs are all RoCE v2.
			p("\t\t\tGID[%3d]:\t\t%s, RoCE v2\n", i, netip.AddrFrom16(g))
		}
		p("\n")
	}
	// Not in ibv_devinfo's layout: what rdma link show says beside it, and
	// what the daemon is. A daemon older than query_daemon does not say.
	if di, err := d.Daemon(); err == nil {
		p("\tnetdev:\t\t\t\t%s\n", orDash(di.Netdev))
		p("\tmode:\t\t\t\t%s\n", orDash(di.Mode))
		p("\tdaemon_version:\t\t\t%s\n", orDash(di.Version))
		p("\tuptime:\t\t\t\t%s\n", di.Uptime.Truncate(time.Second))
	}
	// A port impaired on purpose says so (vrnicctl impair), so that it is
	// not forgotten.
	if im, on, err := d.Impairment(); err == nil && on {
		p("\t%s\n", impairText(im, on))
	}
	return b.Flush()
}

// orDash is s, or "-" for nothing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// nullGID is devinfo.c's test for an empty slot: no interface ID.
func nullGID(g verbs.GID) bool {
	for _, x := range g[8:] {
		if x != 0 {
			return false
		}
	}
	return true
}
