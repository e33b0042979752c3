package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vrnic/vrnicd/nic/capture"
	"github.com/vrnic/vrnicd/nic/metrics"
	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// scrape GETs /metrics over the Unix socket and parses the text exposition
// format with the Prometheus library's parser.
func scrape(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeAt(t, "unix", path)
}

// scrapeAt scrapes http://ADDR/metrics over network ("tcp" or "unix").
func scrapeAt(t *testing.T, network, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	req, _ := http.NewRequest("GET", "http://vrnicd/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("exposition format: %v", err)
	}
	return mfs
}

// getPage GETs another path of the metrics listener (unix socket path).
func getPage(t *testing.T, path, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}}
	resp, err := c.Get("http://vrnicd" + url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(b)
}

// series returns the value of the family's series whose labels include
// want, and whether there is one.
func series(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		}
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// TestMetrics: two raw-mode daemons, A serving --metrics on a Unix socket.
// RC traffic moves A's device and QP counters; the QP's series carry its
// qpn, type and owner's pid, and vanish when the QP is destroyed.
func TestMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.sock")
	n := newE2ENet(t, "--metrics", "unix:"+path)
	if got := recordString(n.a.ready, "metrics"); got != "unix:"+path {
		t.Errorf("ready line metrics=%q", got)
	}
	before := scrape(t, path)
	for _, name := range []string{"vrnicd_sent_pkts_total", "vrnicd_rcvd_pkts_total", "vrnicd_duplicate_request_total",
		"vrnicd_out_of_seq_request_total", "vrnicd_rcvd_rnr_err_total", "vrnicd_send_rnr_err_total",
		"vrnicd_rcvd_seq_err_total", "vrnicd_retry_exceeded_err_total", "vrnicd_retry_rnr_exceeded_err_total",
		"vrnicd_completer_retry_err_total", "vrnicd_send_err_total", "vrnicd_icrc_errors_total",
		"vrnicd_port_frames_in_total", "vrnicd_port_roce_out_total"} {
		mf := before[name]
		if mf == nil || mf.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s: missing or not a counter: %v", name, mf)
		}
	}
	for _, name := range []string{"process_cpu_seconds_total", "process_open_fds", "go_goroutines", "vrnicd_clients", "vrnicd_qps"} {
		if before[name] == nil {
			t.Errorf("no %s", name)
		}
	}
	sent0, _ := series(before, "vrnicd_sent_pkts_total", nil)
	// The build: the version --version and the ready line give; the
	// impairment gauge at 0 on a daemon that was never impaired.
	ver := strings.Fields(recordString(n.a.ready, "version"))
	if len(ver) < 2 {
		t.Fatalf("ready line version=%q", recordString(n.a.ready, "version"))
	}
	if v, ok := series(before, "vrnicd_build_info", map[string]string{"version": ver[1]}); !ok || v != 1 {
		t.Errorf("vrnicd_build_info{version=%q} = %v, %v", ver[1], v, ok)
	}
	if v, ok := series(before, "vrnicd_port_impaired", nil); !ok || v != 0 {
		t.Errorf("vrnicd_port_impaired = %v, %v; want 0", v, ok)
	}
	if page := getPage(t, path, "/"); !strings.Contains(page, `href="/metrics"`) || !strings.Contains(page, ver[1]) {
		t.Errorf("/ is not a page linking /metrics with the version:\n%s", page)
	}

	a := e2eOpen(t, n.sockA, e2eA4, e2eA6).end(verbs.QPTypeRC, nil, 1<<16)
	b := e2eOpen(t, n.sockB, e2eB4, e2eB6).end(verbs.QPTypeRC, nil, 1<<16)
	e2eConnect(t, a, b, e2eLink{})
	if err := b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.mr.SGE(0, 8192)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 5000)}}); err != nil {
		t.Fatal(err)
	}
	ok(t, b.rcq, 1, verbs.WCRecv)
	ok(t, a.scq, 2, verbs.WCSend)

	qp := map[string]string{"qpn": strconv.FormatUint(uint64(a.qp.QPN()), 10), "type": "RC", "owner_pid": strconv.Itoa(os.Getpid()), "device": "vrnicA"}
	after := scrape(t, path)
	if sent, _ := series(after, "vrnicd_sent_pkts_total", nil); sent < sent0+5 {
		t.Errorf("vrnicd_sent_pkts_total %v after a 5-packet SEND, %v before", sent, sent0)
	}
	if v, found := series(after, "vrnicd_qp_sent_pkts_total", qp); !found || v < 5 {
		t.Errorf("vrnicd_qp_sent_pkts_total%v = %v (found %v), want >= 5", qp, v, found)
	}
	if v, found := series(after, "vrnicd_qp_rcvd_pkts_total", qp); !found || v < 1 {
		t.Errorf("vrnicd_qp_rcvd_pkts_total%v = %v (found %v), want the ACKs", qp, v, found)
	}
	if v, _ := series(after, "vrnicd_qps", map[string]string{"type": "RC"}); v != 1 {
		t.Errorf("vrnicd_qps{type=RC} = %v, want 1", v)
	}
	if v, _ := series(after, "vrnicd_clients", nil); v != 1 {
		t.Errorf("vrnicd_clients = %v, want 1", v)
	}
	// The client's objects: one QP, at least a PD and CQs, and the memory
	// its rings and buffer map.
	for kind, least := range map[string]float64{"qp": 1, "pd": 1, "cq": 1} {
		if v, _ := series(after, "vrnicd_client_objects", map[string]string{"kind": kind}); v < least {
			t.Errorf("vrnicd_client_objects{kind=%s} = %v, want >= %v", kind, v, least)
		}
	}
	if v, _ := series(after, "vrnicd_client_memory_bytes", map[string]string{"kind": "mapped"}); v <= 0 {
		t.Errorf("vrnicd_client_memory_bytes{kind=mapped} = %v", v)
	}

	if err := a.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	gone := scrape(t, path)
	for name, mf := range gone {
		if _, found := series(gone, name, map[string]string{"qpn": qp["qpn"]}); found {
			t.Errorf("%s still has the destroyed QP's series: %v", name, mf)
		}
	}
	if v, _ := series(gone, "vrnicd_qps", map[string]string{"type": "RC"}); v != 0 {
		t.Errorf("vrnicd_qps{type=RC} = %v after the destroy", v)
	}
	if v, _ := series(gone, "vrnicd_client_objects", map[string]string{"kind": "qp"}); v != 0 {
		t.Errorf("vrnicd_client_objects{kind=qp} = %v after the destroy", v)
	}
	if sent, _ := series(gone, "vrnicd_sent_pkts_total", nil); sent < sent0+5 {
		t.Errorf("the device total %v lost the destroyed QP's packets", sent)
	}
}

// The listener on TCP (port 0: the one chosen is reported), the daemon's
// own counters and the client count; a stale Unix socket is replaced, a
// live one refused; close stops serving.
func TestMetricsListener(t *testing.T) {
	h, _ := nictest.Pair(t, 1500)
	hub := &capture.Hub{}
	src := metrics.Source{Device: h.Dev, Port: h.Stack.Counters().Each, Daemon: hub.Each, Clients: func() int { return 3 }}
	log := slog.New(slog.DiscardHandler)
	m, err := startMetrics("127.0.0.1:0", src, log)
	if err != nil {
		t.Fatal(err)
	}
	addr := m.addr()
	mfs := scrapeAt(t, "tcp", addr)
	if v, _ := series(mfs, "vrnicd_clients", map[string]string{"device": "vrnic0"}); v != 3 {
		t.Errorf("vrnicd_clients = %v, want 3", v)
	}
	for _, n := range []string{"vrnicd_capture_frames_total", "vrnicd_capture_dropped_frames_total", "vrnicd_closed_qp_acks_total"} {
		if mf := mfs[n]; mf == nil || mf.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s: %v", n, mf)
		}
	}
	if _, dup := mfs["vrnicd_port_icrc_errors_total"]; dup {
		t.Error("icrc_errors exported twice: the port's is in vrnicd_icrc_errors_total")
	}
	m.close()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("still listening after close")
	}

	path := filepath.Join(t.TempDir(), "m.sock")
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	m, err = startMetrics("unix:"+path, src, log)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	defer m.close()
	if _, err := startMetrics("unix:"+path, src, log); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second listener on a live socket: %v", err)
	}
	scrape(t, path)
}
