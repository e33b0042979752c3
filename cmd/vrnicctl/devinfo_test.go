package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server"
)

// daemonHost is an in-process verbsock server over a nictest device
// (192.0.2.1, MAC 02:00:00:00:00:01), listening on a socket in a temp
// directory, with the port's counters as the daemon passes them and its
// interface, mode and version as vrnicd says them (netdev "vrnic0", TAP
// mode, version "v0.0-test", started a minute and a half ago).
func daemonHost(t *testing.T) (*nictest.Host, *nictest.Host, string) {
	t.Helper()
	ha, hb := nictest.Pair(t, 1500)
	srv, err := server.New(server.Config{Device: ha.Dev, ExtraCounters: ha.Stack.Counters().Each,
		Netdev: "vrnic0", Mode: verbsock.ModeTAP, Version: "v0.0-test", Started: time.Now().Add(-90 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "vrnicd.sock")
	l, err := server.Listen(path, -1)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return ha, hb, path
}

// devinfoWant is ibv_devinfo -v's output for the nictest device, line for
// line in devinfo.c's layout (tabs as it prints them). The values are
// vrnicd's, kernel rxe's where vrnicd has the same limits (rxe-peer
// README "ibv_devinfo -v": fw_ver 0.0.0, vendor_id 0xffffff, max_mr_size,
// page_size_cap, device_cap_flags 0x01223c76 and its names, max_sge 32,
// max_mr 524287, max_res_rd_atom 258048, atomic_cap ATOMIC_HCA (1),
// max_mw 524287, max_ah 32767, local_ca_ack_delay 15, PORT_ACTIVE,
// max_mtu 4096 (5), active_mtu 1024 (3), port_cap_flags 0x00010000,
// pkey_tbl_len 1, gid_tbl_len 1024, 1X, 2.5 Gbps, LINK_UP).
const devinfoWant = `hca_id:	vrnic0
	transport:			InfiniBand (0)
	fw_ver:				0.0.0
	node_guid:			0000:00ff:fe00:0001
	sys_image_guid:			0000:00ff:fe00:0001
	vendor_id:			0xffffff
	vendor_part_id:			0
	hw_ver:				0x0
	phys_port_cnt:			1
	max_mr_size:			0xffffffffffffffff
	page_size_cap:			0xfffff000
	max_qp:				65536
	max_qp_wr:			16384
	device_cap_flags:		0x01223c76
					BAD_PKEY_CNTR
					BAD_QKEY_CNTR
					AUTO_PATH_MIG
					CHANGE_PHY_PORT
					UD_AV_PORT_ENFORCE
					PORT_ACTIVE_EVENT
					SYS_IMAGE_GUID
					RC_RNR_NAK_GEN
					SRQ_RESIZE
					MEM_WINDOW
					MEM_MGT_EXTENSIONS
					MEM_WINDOW_TYPE_2B
	max_sge:			32
	max_sge_rd:			32
	max_cq:				65536
	max_cqe:			65536
	max_mr:				524287
	max_pd:				65536
	max_qp_rd_atom:			128
	max_ee_rd_atom:			0
	max_res_rd_atom:		258048
	max_qp_init_rd_atom:		128
	max_ee_init_rd_atom:		0
	atomic_cap:			ATOMIC_HCA (1)
	max_ee:				0
	max_rdd:			0
	max_mw:				524287
	max_raw_ipv6_qp:		0
	max_raw_ethy_qp:		0
	max_mcast_grp:			8192
	max_mcast_qp_attach:		56
	max_total_mcast_qp_attach:	458752
	max_ah:				32767
	max_fmr:			0
	max_srq:			16384
	max_srq_wr:			16384
	max_srq_sge:			32
	max_pkeys:			1
	local_ca_ack_delay:		15
	general_odp_caps:
	rc_odp_caps:
					NO SUPPORT
	uc_odp_caps:
					NO SUPPORT
	ud_odp_caps:
					NO SUPPORT
	xrc_odp_caps:
					NO SUPPORT
	completion_timestamp_mask not supported
	core clock not supported
	device_cap_flags_ex:		0x1223C76
	tso_caps:
		max_tso:			0
	rss_caps:
		max_rwq_indirection_tables:			0
		max_rwq_indirection_table_size:			0
		rx_hash_function:				0x0
		rx_hash_fields_mask:				0x0
	max_wq_type_rq:			0
	packet_pacing_caps:
		qp_rate_limit_min:	0kbps
		qp_rate_limit_max:	0kbps
	tag matching not supported
	num_comp_vectors:		1
		port:	1
			state:			PORT_ACTIVE (4)
			max_mtu:		4096 (5)
			active_mtu:		1024 (3)
			sm_lid:			0
			port_lid:		0
			port_lmc:		0x00
			link_layer:		Ethernet
			max_msg_sz:		0x80000000
			port_cap_flags:		0x00010000
			port_cap_flags2:	0x0000
			max_vl_num:		1 (1)
			bad_pkey_cntr:		0x0
			qkey_viol_cntr:		0x0
			sm_sl:			0
			pkey_tbl_len:		1
			gid_tbl_len:		1024
			subnet_timeout:		0
			init_type_reply:	0
			active_width:		1X (1)
			active_speed:		2.5 Gbps (1)
			phys_state:		LINK_UP (5)
			GID[  0]:		fe80::ff:fe00:1, RoCE v2
			GID[  1]:		::ffff:192.0.2.1, RoCE v2

	netdev:				vrnic0
	mode:				tap
	daemon_version:			v0.0-test
	uptime:				1m30s
`

func TestDevinfo(t *testing.T) {
	_, _, sock := daemonHost(t)
	rc, out, errOut := runCmd("devinfo", "--socket", sock)
	if rc != 0 {
		t.Fatalf("devinfo: exit %d, stderr %q", rc, errOut)
	}
	// The uptime is 1m30s and the time the test has taken.
	out = regexp.MustCompile(`(?m)^(\tuptime:\t+)1m3\ds$`).ReplaceAllString(out, "${1}1m30s")
	if out != devinfoWant {
		got, want := strings.Split(out, "\n"), strings.Split(devinfoWant, "\n")
		for i := range max(len(got), len(want)) {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("line %d:\n got %q\nwant %q", i+1, g, w)
			}
		}
	}
}

func TestAdminCommandsWithoutDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, cmd := range []string{"devinfo", "stat", "qp"} {
		rc, out, errOut := runCmd(cmd, "--socket", sock)
		if rc != exitFail || out != "" || !strings.HasPrefix(errOut, "vrnicctl "+cmd+": cannot reach vrnicd at "+sock) ||
			strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s without a daemon: exit %d, stdout %q, stderr %q", cmd, rc, out, errOut)
		}
	}
	if rc, _, _ := runCmd("stat", "extra"); rc != exitUsage {
		t.Errorf("stat with an argument: exit %d, want %d", rc, exitUsage)
	}
}

// devinfo --json: one object with the device's attributes, the daemon's
// netdev, mode, version and uptime, and the ports with their GIDs as
// named lists.
func TestDevinfoJSON(t *testing.T) {
	_, _, sock := daemonHost(t)
	var doc jsonDevinfo
	runJSON(t, &doc, "devinfo", "--json", "--socket", sock)
	if doc.HCAID != "vrnic0" || doc.NodeGUID != "0000:00ff:fe00:0001" || doc.MaxQP != 65536 || doc.AtomicCap != "ATOMIC_HCA" ||
		len(doc.DeviceCaps) != 12 || doc.DeviceCaps[0] != "BAD_PKEY_CNTR" || doc.MaxSRQWR != 16384 {
		t.Errorf("device: %+v", doc)
	}
	if doc.Netdev != "vrnic0" || doc.Mode != "tap" || doc.Version != "v0.0-test" || doc.UptimeS < 90 || doc.UptimeS > 200 {
		t.Errorf("daemon: netdev %q mode %q version %q uptime %d s", doc.Netdev, doc.Mode, doc.Version, doc.UptimeS)
	}
	want := jsonPort{Port: 1, State: "PORT_ACTIVE", PhysState: "LINK_UP", MaxMTU: 4096, ActiveMTU: 1024, LinkLayer: "Ethernet",
		MaxMsgSize: 0x80000000, CapFlags: 0x10000, PKeyTblLen: 1, GIDTblLen: 1024,
		GIDs: []jsonGID{{0, "fe80::ff:fe00:1", "RoCE v2"}, {1, "::ffff:192.0.2.1", "RoCE v2"}}}
	if len(doc.Ports) != 1 || fmt.Sprint(doc.Ports[0]) != fmt.Sprint(want) {
		t.Errorf("ports %+v, want [%+v]", doc.Ports, want)
	}
}
