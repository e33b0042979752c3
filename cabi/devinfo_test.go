package cabi

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// ibv_devices and ibv_devinfo -v show the device as the daemon describes
// it to the Go SDK (what vrnicctl devinfo prints): one device per socket,
// its GUID, limits, port state, MTUs and GID table.
func TestDevicesAndDevinfo(t *testing.T) {
	needProgram(t, "ibv_devinfo", "ibverbs-utils")
	tl, ds := devices(t, 1500)
	d, err := verbs.Open(ds[0].Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, err := d.Query()
	if err != nil {
		t.Fatal(err)
	}
	pa, err := d.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	guid := fmt.Sprintf("%04x:%04x:%04x:%04x", a.NodeGUID>>48&0xffff, a.NodeGUID>>32&0xffff, a.NodeGUID>>16&0xffff,
		a.NodeGUID&0xffff)

	both := tool{tl[0].libDir, ds[0].Socket + ":" + ds[1].Socket, ""}
	out, err := both.run(t, 10*time.Second, "ibv_devices")
	if err != nil {
		t.Fatalf("ibv_devices: %v\n%s", err, out)
	}
	if rows := regexp.MustCompile(`(?m)^\s+\S+\s+[0-9a-f]{16}\s*$`).FindAllString(out, -1); len(rows) != 2 ||
		!strings.Contains(out, strings.ReplaceAll(guid, ":", "")) {
		t.Fatalf("ibv_devices: want two devices, one with GUID %s:\n%s", guid, out)
	}

	out, err = tl[0].run(t, 10*time.Second, "ibv_devinfo", "-v")
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\n%s", err, out)
	}
	field := func(name string) string {
		m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `:\s+(.*)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ibv_devinfo -v has no %s:\n%s", name, out)
		}
		return strings.TrimSpace(m[1])
	}
	for name, want := range map[string]string{
		"hca_id":                    d.Name(),
		"transport":                 "InfiniBand (0)",
		"node_guid":                 guid,
		"vendor_id":                 fmt.Sprintf("0x%04x", a.VendorID),
		"phys_port_cnt":             fmt.Sprint(a.PhysPortCnt),
		"max_qp":                    fmt.Sprint(a.MaxQP),
		"max_qp_wr":                 fmt.Sprint(a.MaxQPWR),
		"device_cap_flags":          fmt.Sprintf("0x%08x", a.DeviceCapFlags),
		"max_sge":                   fmt.Sprint(a.MaxSGE),
		"max_cqe":                   fmt.Sprint(a.MaxCQE),
		"max_mr":                    fmt.Sprint(a.MaxMR),
		"max_qp_rd_atom":            fmt.Sprint(a.MaxQPRdAtom),
		"max_srq_wr":                fmt.Sprint(a.MaxSRQWR),
		"max_pkeys":                 fmt.Sprint(a.MaxPKeys),
		"local_ca_ack_delay":        fmt.Sprint(a.LocalCAAckDelay),
		"state":                     "PORT_ACTIVE (4)",
		"link_layer":                "Ethernet",
		"gid_tbl_len":               fmt.Sprint(pa.GIDTblLen),
		"max_msg_sz":                fmt.Sprintf("0x%x", pa.MaxMsgSize),
		"pkey_tbl_len":              fmt.Sprint(pa.PKeyTblLen),
		"phys_state":                "LINK_UP (5)",
		"max_mtu":                   fmt.Sprintf("%d (%d)", 128<<pa.MaxMTU, pa.MaxMTU),
		"active_mtu":                fmt.Sprintf("%d (%d)", 128<<pa.ActiveMTU, pa.ActiveMTU),
		"num_comp_vectors":          "1",
		"max_mcast_grp":             fmt.Sprint(a.MaxMcastGrp),
		"max_mcast_qp_attach":       fmt.Sprint(a.MaxMcastQPAttach),
		"max_total_mcast_qp_attach": fmt.Sprint(a.MaxTotalMcastQPAttach),
		"atomic_cap":                fmt.Sprintf("ATOMIC_HCA (%d)", a.AtomicCap),
	} {
		if got := field(name); got != want {
			t.Errorf("%s: %q, the daemon says %q", name, got, want)
		}
	}
	for i := range int(pa.GIDTblLen) {
		g, err := d.QueryGID(1, i)
		if err != nil || g.IsZero() {
			continue
		}
		want := fmt.Sprintf("GID[%3d]:\t\t%s, RoCE v2", i, g.Addr().String())
		if strings.Contains(g.String(), ".") {
			want = fmt.Sprintf("GID[%3d]:\t\t::ffff:%s, RoCE v2", i, g.String())
		}
		if !strings.Contains(out, want) {
			t.Errorf("ibv_devinfo -v lacks %q:\n%s", want, out)
		}
	}
}
