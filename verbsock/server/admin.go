package server

import (
	"fmt"
	"math"
	"sort"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/verbsock"
)

// AdminDevice is what query_stats and list_qps need of the device;
// *nic.Device has it. A Device without it answers them EOPNOTSUPP.
type AdminDevice interface {
	QPs() []nic.QPInfo
	QP(qpn uint32) (*nic.QP, bool)
	Counters() *transport.Counters
}

var _ AdminDevice = (*nic.Device)(nil)

// CounterFunc calls yield with every counter's name and value, in a fixed
// order (netstack.Counters.Each has this shape).
type CounterFunc func(yield func(name string, v uint64))

// checkExtraCounters refuses extra counters that cannot be reported whole:
// a name longer than a Stat's name field, or more counters than a reply
// holds beside the transport's.
func checkExtraCounters(f CounterFunc) error {
	if f == nil {
		return nil
	}
	names := map[string]bool{}
	for _, n := range transport.CounterNames() {
		names[n] = true
	}
	var err error
	f(func(name string, _ uint64) {
		switch {
		case err != nil:
		case name == "" || len(name) > verbsock.StatNameLen:
			err = fmt.Errorf("server: extra counter name %q: 1..%d bytes", name, verbsock.StatNameLen)
		case !names[name]:
			names[name] = true
			if len(names) > verbsock.MaxDeviceStats {
				err = fmt.Errorf("server: more than %d device counters", verbsock.MaxDeviceStats)
			}
		}
	})
	return err
}

// qpPager pages through one snapshot of the device's QP list (request
// loop only). It keeps 8 bytes a QP: what is read later comes from the QP.
type qpPager struct{ snap []qpRef }

type qpRef struct {
	qpn   uint32
	owner int32
}

// page returns the QPs from QPN start on, at most n, and the QPN the next
// page starts at (0: this is the last). Start 0 takes a new snapshot.
func (p *qpPager) page(ad AdminDevice, start uint32, n int) ([]qpRef, uint32) {
	if start == 0 || p.snap == nil {
		qs := ad.QPs()
		p.snap = make([]qpRef, len(qs))
		for i, q := range qs {
			p.snap[i] = qpRef{qpn: q.QPN, owner: int32(q.Owner)}
		}
	}
	i := sort.Search(len(p.snap), func(i int) bool { return p.snap[i].qpn >= start })
	j := min(i+n, len(p.snap))
	page := p.snap[i:j]
	if j == len(p.snap) {
		p.snap = nil // done: free it
		return page, 0
	}
	return page, p.snap[j].qpn
}

func (c *conn) adminDevice(op verbsock.Op) (AdminDevice, error) {
	ad, ok := c.s.dev.(AdminDevice)
	if !ok {
		return nil, errf(syscall.EOPNOTSUPP, "%v: the device keeps no QP list or counters", op)
	}
	return ad, nil
}

func putName(dst *[verbsock.StatNameLen]byte, s string) { copy(dst[:], s) }

func (c *conn) queryStats(r *verbsock.PageReq) (any, error) {
	ad, err := c.adminDevice(verbsock.OpQueryStats)
	if err != nil {
		return nil, err
	}
	resp := &verbsock.QueryStatsResp{}
	// The transport's counters first: a QP record's values are these.
	tnames := transport.CounterNames()
	slot := make(map[string]int, len(tnames))
	dc := ad.Counters()
	for i, n := range tnames {
		if i == verbsock.MaxDeviceStats {
			break
		}
		putName(&resp.Device[i].Name, n)
		resp.Device[i].Value = dc.Get(transport.Counter(i))
		slot[n] = i
	}
	nd := min(len(tnames), verbsock.MaxDeviceStats)
	if f := c.s.cfg.ExtraCounters; f != nil {
		f(func(name string, v uint64) {
			if i, ok := slot[name]; ok {
				resp.Device[i].Value += v // counted by the link layer, not the transport (icrc_errors)
				return
			}
			if nd == verbsock.MaxDeviceStats || len(name) > verbsock.StatNameLen {
				return // refused by New; the set does not change
			}
			putName(&resp.Device[nd].Name, name)
			resp.Device[nd].Value = v
			slot[name] = nd
			nd++
		})
	}
	nq := min(len(tnames), verbsock.MaxQPStats)
	resp.NumDevice, resp.NumQPValues = uint16(nd), uint16(nq)
	page, next := c.statsPages.page(ad, r.Start, verbsock.StatsQPsPage)
	k := 0
	for _, ref := range page {
		q, ok := ad.QP(ref.qpn)
		if !ok {
			continue // destroyed since the snapshot
		}
		qc := q.Counters()
		rec := &resp.QPs[k]
		rec.QPN = ref.qpn
		for i := range nq {
			rec.Values[i] = qc.Get(transport.Counter(i))
		}
		k++
	}
	resp.NumQPs, resp.Next = uint16(k), next
	return resp, nil
}

func (c *conn) listQPs(r *verbsock.PageReq) (any, error) {
	ad, err := c.adminDevice(verbsock.OpListQPs)
	if err != nil {
		return nil, err
	}
	resp := &verbsock.ListQPsResp{}
	page, next := c.listPages.page(ad, r.Start, verbsock.ListQPsPage)
	k := 0
	for _, ref := range page {
		q, ok := ad.QP(ref.qpn)
		if !ok {
			continue
		}
		in := q.Info() // now, not at the snapshot
		resp.QPs[k] = verbsock.QPEntry{QPN: in.QPN, DestQPN: in.DestQPN, SendPSN: in.SendPSN, CompPSN: in.CompPSN,
			RecvPSN: in.RecvPSN, Outstanding: uint32(max(in.Outstanding, 0)), Owner: uint32(max(ref.owner, 0)),
			Type: uint8(in.Type), State: uint8(in.State), Window: uint32(max(in.Window, 0)),
			SRTTUS: uint32(min(in.SRTT/time.Microsecond, math.MaxUint32))}
		if in.Type == transport.QPTypeRC || in.Type == transport.QPTypeUC {
			a, _ := q.Engine().Query()
			resp.QPs[k].DGID = a.AV.DGID
		}
		k++
	}
	resp.Count, resp.Next = uint32(k), next
	return resp, nil
}
