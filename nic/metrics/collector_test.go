package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/capture"
	"github.com/vrnic/vrnicd/nic/metrics"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/transport"
)

// The collector under a pedantic registry (what Collect sends must match
// Describe) passes Prometheus' own metric lint (names, units, _total on
// counters, HELP), and exports one series per live QP and counter.
func TestCollectorLint(t *testing.T) {
	h, _ := nictest.Pair(t, 1500)
	pd, err := h.Dev.Mem().AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq := transport.NewMemCQ(16, nil)
	var qps []*nic.QP
	for _, typ := range []transport.QPType{transport.QPTypeRC, transport.QPTypeUD} {
		q, err := h.Dev.CreateQP(nic.QPConfig{Type: typ, PD: pd, SendCQ: cq, RecvCQ: cq,
			Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qps = append(qps, q)
	}
	hub := &capture.Hub{}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.New(metrics.Source{Device: h.Dev, Port: h.Stack.Counters().Each, Daemon: hub.Each,
		Clients: func() int { return 0 }}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	if n := len(byName["vrnicd_qp_sent_pkts_total"].GetMetric()); n != 2 {
		t.Errorf("%d vrnicd_qp_sent_pkts_total series for 2 QPs", n)
	}
	qps[0].Destroy()
	mfs, _ = reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "vrnicd_qp_sent_pkts_total" && len(mf.GetMetric()) != 1 {
			t.Errorf("%d series after one of 2 QPs was destroyed", len(mf.GetMetric()))
		}
	}
}
