package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vrnic/vrnicd/cmd/internal/version"
	"github.com/vrnic/vrnicd/nic/metrics"
)

// Limits of the metrics listener: a scrape is a few hundred series per
// QP at most, and a stuck or hostile client must not hold connections.
const (
	metricsReadTimeout  = 5 * time.Second
	metricsWriteTimeout = 10 * time.Second
	metricsInFlight     = 4 // concurrent scrapes; more get 503
	metricsMaxHeader    = 16 << 10
)

// metricsServer serves /metrics (--metrics). Scrapes read the device's
// atomics through metrics.Collector on the HTTP server's goroutines; the
// datapath never waits for them.
type metricsServer struct {
	ln   net.Listener
	srv  *http.Server
	unix string // the socket file to remove, "" for TCP
	done chan struct{}
}

// listenMetrics opens addr: "host:port" (TCP) or "unix:PATH". A stale Unix
// socket (nobody listening) is replaced.
func listenMetrics(addr string) (net.Listener, string, error) {
	path, isUnix := strings.CutPrefix(addr, "unix:")
	if !isUnix {
		ln, err := net.Listen("tcp", addr)
		return ln, "", err
	}
	ln, err := net.Listen("unix", path)
	if errors.Is(err, syscall.EADDRINUSE) {
		if c, derr := net.DialTimeout("unix", path, time.Second); derr == nil {
			c.Close()
			return nil, "", fmt.Errorf("%s is in use by a running process", path)
		}
		os.Remove(path)
		ln, err = net.Listen("unix", path)
	}
	return ln, path, err
}

// startMetrics serves the collector's source, and the process and Go
// runtime collectors, on addr.
func startMetrics(addr string, src metrics.Source, log *slog.Logger) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(metrics.New(src)); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	build := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "build_info",
		Help:        "Always 1; its labels are the version vrnicd --version prints and the Go release it was built with.",
		ConstLabels: prometheus.Labels{"version": version.Version(), "goversion": version.GoVersion()}})
	build.Set(1)
	reg.MustRegister(build)
	ln, path, err := listenMetrics(addr)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", addr, unwrapPath(err))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><title>vrnicd</title></head><body>\n"+
			"<h1>vrnicd</h1>\n<p>%s</p>\n<p><a href=\"/metrics\">Metrics</a></p>\n</body></html>\n",
			html.EscapeString(versionString()))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: metricsInFlight,
		Timeout:             metricsWriteTimeout,
	}))
	m := &metricsServer{ln: ln, unix: path, done: make(chan struct{}), srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: metricsReadTimeout,
		ReadTimeout:       metricsReadTimeout,
		WriteTimeout:      metricsWriteTimeout,
		MaxHeaderBytes:    metricsMaxHeader,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener failed", "addr", addr, "err", err)
		}
	}()
	return m, nil
}

// addr is where the listener is, for the ready line (the port chosen for
// ":0").
func (m *metricsServer) addr() string {
	if m.unix != "" {
		return "unix:" + m.unix
	}
	return m.ln.Addr().String()
}

// close stops serving: scrapes in flight get a short grace, then their
// connections are cut.
func (m *metricsServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if m.srv.Shutdown(ctx) != nil {
		m.srv.Close()
	}
	<-m.done
	if m.unix != "" {
		os.Remove(m.unix)
	}
}
