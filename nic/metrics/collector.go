// Package metrics exports a device's counters to Prometheus. Collector reads
// the live tables at scrape time: every value is an atomic load, and a
// destroyed QP's series vanish with the QP, so per-QP cardinality is bounded
// by the device's QP limit and nothing is ever unregistered.
package metrics

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/transport"
)

// Namespace prefixes every metric name.
const Namespace = "vrnicd"

// CounterFunc calls yield with every counter's name and value, in a fixed
// order and a fixed set (netstack.Counters.Each has this shape).
type CounterFunc func(yield func(name string, v uint64))

// Source is what a Collector reads.
type Source struct {
	Device *nic.Device
	// Port are the link layer's counters (netstack.Counters.Each), exported
	// as vrnicd_port_NAME_total; one that shares a transport counter's name
	// (icrc_errors, counted by the link layer) is added to the device's
	// instead, as query_stats does.
	Port CounterFunc
	// Daemon are the daemon's own counters (live capture's drops, ...),
	// exported as vrnicd_NAME_total.
	Daemon CounterFunc
	// Clients is the number of connected clients; nil exports none.
	Clients func() int
	// Objects are what the clients hold, by kind (pd, cq, qp, srq, mr,
	// mw, ah, mem; *_bytes in bytes); nil exports none.
	Objects CounterFunc
	// Impaired says whether faults are injected into the port's frames
	// (vrnicctl impair); nil exports none.
	Impaired func() bool
}

// Collector is a prometheus.Collector over a Source.
type Collector struct {
	src       Source
	names     []string // transport counters, by transport.Counter
	dev, qp   []*prometheus.Desc
	port      map[string]*prometheus.Desc // nil entry: merged into dev
	portOrder []string
	daemon    map[string]*prometheus.Desc
	qps       *prometheus.Desc
	portState *prometheus.Desc // ibv_port_state: 1 DOWN, 4 ACTIVE
	impaired  *prometheus.Desc
	activeMTU *prometheus.Desc
	linkMTU   *prometheus.Desc
	clients   *prometheus.Desc
	objects   *prometheus.Desc
	objBytes  *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// New builds the collector; the Port and Daemon sets are read once, here.
func New(src Source) *Collector {
	c := &Collector{src: src, names: transport.CounterNames(), port: map[string]*prometheus.Desc{},
		daemon: map[string]*prometheus.Desc{}}
	dl := prometheus.Labels{"device": src.Device.Name()}
	slot := map[string]bool{}
	for _, n := range c.names {
		slot[n] = true
		c.dev = append(c.dev, prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", n+"_total"),
			help(n)+" (device total, destroyed QPs included).", nil, dl))
		c.qp = append(c.qp, prometheus.NewDesc(prometheus.BuildFQName(Namespace, "qp", n+"_total"),
			help(n)+" (one QP).", []string{"qpn", "type", "owner_pid"}, dl))
	}
	if src.Port != nil {
		src.Port(func(n string, _ uint64) {
			c.portOrder = append(c.portOrder, n)
			if slot[n] {
				c.port[n] = nil
				return
			}
			c.port[n] = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "port", promName(n)+"_total"),
				"Port (link layer) counter "+n+".", nil, dl)
		})
	}
	if src.Daemon != nil {
		src.Daemon(func(n string, _ uint64) {
			c.daemon[n] = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", n+"_total"), help(n)+".", nil, dl)
		})
	}
	c.qps = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "qps"), "Live QPs by type.", []string{"type"}, dl)
	c.portState = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "port", "state"),
		"The port's state as ibv_query_port gives it: 1 DOWN (the link is down or has no carrier), 4 ACTIVE.", nil, dl)
	c.activeMTU = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "port", "active_mtu_bytes"),
		"The port's active MTU: the largest IBA MTU that fits the link's MTU.", nil, dl)
	c.linkMTU = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "port", "link_mtu_bytes"),
		"The link's (the interface's) MTU.", nil, dl)
	if src.Impaired != nil {
		c.impaired = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "port", "impaired"),
			"1 while faults are injected into the port's RoCEv2 frames on purpose (vrnicctl impair; counted in vrnicd_port_impair_*_total).", nil, dl)
	}
	if src.Clients != nil {
		c.clients = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "clients"), "Connected client processes.", nil, dl)
	}
	if src.Objects != nil {
		c.objects = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "client_objects"),
			"Objects the clients hold, by kind (pd, cq, qp, srq, mr, mw, ah, mem).", []string{"kind"}, dl)
		c.objBytes = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "client_memory_bytes"),
			"Daemon memory the clients' objects cost (mapped: memfds mapped and private per-QP memory; registered: bytes in MRs).",
			[]string{"kind"}, dl)
	}
	return c
}

// promNames rename the counters whose names Prometheus' conventions read
// otherwise: "us" is its abbreviation of microseconds.
var promNames = map[string]string{"not_for_us": "not_ours"}

func promName(n string) string {
	if p, ok := promNames[n]; ok {
		return p
	}
	return n
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for i := range c.dev {
		ch <- c.dev[i]
		ch <- c.qp[i]
	}
	for _, n := range c.portOrder {
		if d := c.port[n]; d != nil {
			ch <- d
		}
	}
	for _, d := range c.daemon {
		ch <- d
	}
	ch <- c.qps
	ch <- c.portState
	ch <- c.activeMTU
	ch <- c.linkMTU
	if c.impaired != nil {
		ch <- c.impaired
	}
	if c.clients != nil {
		ch <- c.clients
	}
	if c.objects != nil {
		ch <- c.objects
		ch <- c.objBytes
	}
}

// Collect implements prometheus.Collector: device, port and daemon
// counters, then one series per live QP and counter.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	dc := c.src.Device.Counters()
	dev := make([]uint64, len(c.names))
	for i := range dev {
		dev[i] = dc.Get(transport.Counter(i))
	}
	if c.src.Port != nil {
		c.src.Port(func(n string, v uint64) {
			d, ok := c.port[n]
			switch {
			case !ok:
				// not in the set New saw: the contract says it cannot happen
			case d == nil:
				for i, tn := range c.names {
					if tn == n {
						dev[i] += v
					}
				}
			default:
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
			}
		})
	}
	for i, v := range dev {
		ch <- prometheus.MustNewConstMetric(c.dev[i], prometheus.CounterValue, float64(v))
	}
	if c.src.Daemon != nil {
		c.src.Daemon(func(n string, v uint64) {
			if d, ok := c.daemon[n]; ok {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
			}
		})
	}
	port := c.src.Device.Port()
	ch <- prometheus.MustNewConstMetric(c.portState, prometheus.GaugeValue, float64(port.State))
	ch <- prometheus.MustNewConstMetric(c.activeMTU, prometheus.GaugeValue, float64(port.ActiveMTU.Bytes()))
	ch <- prometheus.MustNewConstMetric(c.linkMTU, prometheus.GaugeValue, float64(c.src.Device.LinkMTU()))
	if c.impaired != nil {
		v := 0.0
		if c.src.Impaired() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.impaired, prometheus.GaugeValue, v)
	}
	if c.clients != nil {
		ch <- prometheus.MustNewConstMetric(c.clients, prometheus.GaugeValue, float64(c.src.Clients()))
	}
	if c.objects != nil {
		c.src.Objects(func(kind string, v uint64) {
			if b, ok := strings.CutSuffix(kind, "_bytes"); ok {
				ch <- prometheus.MustNewConstMetric(c.objBytes, prometheus.GaugeValue, float64(v), b)
				return
			}
			ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(v), kind)
		})
	}
	c.collectQPs(ch)
}

// collectQPs exports the live QPs: a QP destroyed since the list was taken
// is skipped, so its series are gone from this scrape on.
func (c *Collector) collectQPs(ch chan<- prometheus.Metric) {
	byType := map[string]int{}
	for _, t := range []transport.QPType{transport.QPTypeRC, transport.QPTypeUC, transport.QPTypeUD, transport.QPTypeGSI} {
		byType[t.String()] = 0
	}
	for _, in := range c.src.Device.QPs() {
		q, ok := c.src.Device.QP(in.QPN)
		if !ok {
			continue
		}
		typ := in.Type.String()
		byType[typ]++
		qpn, owner := strconv.FormatUint(uint64(in.QPN), 10), strconv.Itoa(in.Owner)
		qc := q.Counters()
		for i := range c.names {
			ch <- prometheus.MustNewConstMetric(c.qp[i], prometheus.CounterValue,
				float64(qc.Get(transport.Counter(i))), qpn, typ, owner)
		}
	}
	for typ, n := range byType {
		ch <- prometheus.MustNewConstMetric(c.qps, prometheus.GaugeValue, float64(n), typ)
	}
}
