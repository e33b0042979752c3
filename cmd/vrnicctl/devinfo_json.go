package main

import (
	"io"
	"net/netip"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// jsonDevinfo is devinfo --json: the attributes the daemon reports (not
// the zeros of what vrnicd has not, which the text prints for ibv_devinfo's
// layout), the daemon's own, and the ports.
type jsonDevinfo struct {
	HCAID             string     `json:"hca_id"`
	Transport         string     `json:"transport"`
	FWVer             string     `json:"fw_ver"`
	NodeGUID          string     `json:"node_guid"`
	SysImageGUID      string     `json:"sys_image_guid"`
	VendorID          uint32     `json:"vendor_id"`
	VendorPartID      uint32     `json:"vendor_part_id"`
	HWVer             uint32     `json:"hw_ver"`
	PhysPortCnt       uint32     `json:"phys_port_cnt"`
	MaxMRSize         uint64     `json:"max_mr_size"`
	PageSizeCap       uint64     `json:"page_size_cap"`
	MaxQP             uint32     `json:"max_qp"`
	MaxQPWR           uint32     `json:"max_qp_wr"`
	DeviceCapFlags    uint32     `json:"device_cap_flags"`
	DeviceCaps        []string   `json:"device_caps"`
	MaxSGE            uint32     `json:"max_sge"`
	MaxSGERd          uint32     `json:"max_sge_rd"`
	MaxCQ             uint32     `json:"max_cq"`
	MaxCQE            uint32     `json:"max_cqe"`
	MaxMR             uint32     `json:"max_mr"`
	MaxPD             uint32     `json:"max_pd"`
	MaxQPRdAtom       uint32     `json:"max_qp_rd_atom"`
	MaxResRdAtom      uint32     `json:"max_res_rd_atom"`
	MaxQPInitRdAtom   uint32     `json:"max_qp_init_rd_atom"`
	AtomicCap         string     `json:"atomic_cap"`
	MaxMW             uint32     `json:"max_mw"`
	MaxAH             uint32     `json:"max_ah"`
	MaxSRQ            uint32     `json:"max_srq"`
	MaxSRQWR          uint32     `json:"max_srq_wr"`
	MaxSRQSGE         uint32     `json:"max_srq_sge"`
	MaxPKeys          uint32     `json:"max_pkeys"`
	LocalCAAckDelay   uint32     `json:"local_ca_ack_delay"`
	MaxInlineData     uint32     `json:"max_inline_data"`
	MaxFastRegPageLen uint32     `json:"max_fast_reg_page_list_len"`
	Netdev            string     `json:"netdev"`
	Mode              string     `json:"mode"`
	Version           string     `json:"version"`
	UptimeS           int64      `json:"uptime_s"`
	Impairment        string     `json:"impairment,omitempty"` // as the text says it, when on
	Ports             []jsonPort `json:"ports"`
}

type jsonPort struct {
	Port       uint8     `json:"port"`
	State      string    `json:"state"`
	PhysState  string    `json:"phys_state"`
	MaxMTU     int       `json:"max_mtu"`
	ActiveMTU  int       `json:"active_mtu"`
	LinkLayer  string    `json:"link_layer"`
	MaxMsgSize uint64    `json:"max_msg_sz"`
	CapFlags   uint32    `json:"port_cap_flags"`
	PKeyTblLen uint32    `json:"pkey_tbl_len"`
	GIDTblLen  uint32    `json:"gid_tbl_len"`
	GIDs       []jsonGID `json:"gids"`
}

type jsonGID struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
	Type  string `json:"type"`
}

// devinfoJSON writes devinfo's data as one object with the ports, and
// each port's GIDs in use, as named lists.
func devinfoJSON(d *verbs.Device, w io.Writer) error {
	a, err := d.Query()
	if err != nil {
		return err
	}
	out := deviceJSON(d.Name(), a)
	if di, err := d.Daemon(); err == nil {
		out.Netdev, out.Mode, out.Version, out.UptimeS = di.Netdev, di.Mode, di.Version, int64(di.Uptime.Seconds())
	}
	if im, on, err := d.Impairment(); err == nil && on {
		out.Impairment = impairText(im, on)
	}
	for port := uint8(1); uint32(port) <= a.PhysPortCnt; port++ {
		p, err := portJSON(d, port)
		if err != nil {
			return err
		}
		out.Ports = append(out.Ports, p)
	}
	return writeJSON(w, out)
}

func deviceJSON(name string, a verbs.DeviceAttr) *jsonDevinfo {
	out := &jsonDevinfo{HCAID: name, Transport: "InfiniBand", FWVer: a.FWVer, NodeGUID: guidString(a.NodeGUID),
		SysImageGUID: guidString(a.SysImageGUID), VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer,
		PhysPortCnt: a.PhysPortCnt, MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap, MaxQP: a.MaxQP,
		MaxQPWR: a.MaxQPWR, DeviceCapFlags: a.DeviceCapFlags, DeviceCaps: []string{}, MaxSGE: a.MaxSGE,
		MaxSGERd: a.MaxSGERd, MaxCQ: a.MaxCQ, MaxCQE: a.MaxCQE, MaxMR: a.MaxMR, MaxPD: a.MaxPD,
		MaxQPRdAtom: a.MaxQPRdAtom, MaxResRdAtom: a.MaxResRdAtom, MaxQPInitRdAtom: a.MaxQPInitRdAtom,
		AtomicCap: atomicCapString(a.AtomicCap), MaxMW: a.MaxMW, MaxAH: a.MaxAH, MaxSRQ: a.MaxSRQ,
		MaxSRQWR: a.MaxSRQWR, MaxSRQSGE: a.MaxSRQSGE, MaxPKeys: a.MaxPKeys, LocalCAAckDelay: a.LocalCAAckDelay,
		MaxInlineData: a.MaxInlineData, MaxFastRegPageLen: a.MaxFastRegPageListLen, Ports: []jsonPort{}}
	for _, f := range deviceCapNames {
		if a.DeviceCapFlags&f.bit != 0 {
			out.DeviceCaps = append(out.DeviceCaps, f.name)
		}
	}
	return out
}

// portJSON is one port's attributes and the GID slots in use.
func portJSON(d *verbs.Device, port uint8) (jsonPort, error) {
	pa, err := d.QueryPort(port)
	if err != nil {
		return jsonPort{}, err
	}
	p := jsonPort{Port: port, State: portStateString(pa.State), PhysState: physStateString(pa.PhysState),
		MaxMTU: verbs.MTU(pa.MaxMTU).Bytes(), ActiveMTU: verbs.MTU(pa.ActiveMTU).Bytes(),
		LinkLayer: linkLayerString(pa.LinkLayer), MaxMsgSize: pa.MaxMsgSize, CapFlags: pa.PortCapFlags,
		PKeyTblLen: pa.PKeyTblLen, GIDTblLen: pa.GIDTblLen, GIDs: []jsonGID{}}
	for i := range int(pa.GIDTblLen) {
		g, err := d.QueryGID(port, i)
		if err != nil {
			return jsonPort{}, err
		}
		if !nullGID(g) {
			p.GIDs = append(p.GIDs, jsonGID{Index: i, GID: netip.AddrFrom16(g).String(), Type: "RoCE v2"})
		}
	}
	return p, nil
}
