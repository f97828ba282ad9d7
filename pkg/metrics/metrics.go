// Package metrics owns Ralph mesh's Prometheus metrics: how many events each
// service handled and how (acked, retried, dead-lettered, interrupted), how
// long handlers take, LLM calls and tokens by role, tool calls by tool,
// stuck signals by pattern, and each service's consumer backlog (read from
// JetStream at scrape time). Each process has its own registry, served on
// RALPH_METRICS_ADDR by `ralph up` and `ralph service`, beside the probes.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Metrics is one process's set of metrics.
type Metrics struct {
	reg      *prometheus.Registry
	handled  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	llmCalls *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	tools    *prometheus.CounterVec
	signals  *prometheus.CounterVec
	backlog  *backlog
}

// New registers the metrics on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ralph_events_handled_total", Help: "Events handled, by service, event type and outcome (ack, retry, dead_letter, interrupted).",
		}, []string{"service", "type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ralph_handler_duration_seconds", Help: "Time a service spent handling one event.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 15, 60, 300},
		}, []string{"service", "type"}),
		llmCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ralph_llm_calls_total", Help: "LLM calls by role.",
		}, []string{"role"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ralph_llm_tokens_total", Help: "LLM tokens by role and direction (input, output).",
		}, []string{"role", "direction"}),
		tools: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ralph_tool_calls_total", Help: "Builder tool calls by tool and outcome (ok, error).",
		}, []string{"tool", "outcome"}),
		signals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ralph_stuck_signals_total", Help: "Stuck signals by pattern and recommended action.",
		}, []string{"pattern", "action"}),
		backlog: newBacklog(),
	}
	m.reg.MustRegister(m.handled, m.duration, m.llmCalls, m.tokens, m.tools, m.signals, m.backlog,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handled records one handled event. A nil Metrics records nothing, so
// callers need no checks.
func (m *Metrics) Handled(service, typ, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.handled.WithLabelValues(service, typ, outcome).Inc()
	m.duration.WithLabelValues(service, typ).Observe(d.Seconds())
}

// LLMCall records one LLM call's tokens.
func (m *Metrics) LLMCall(role string, in, out int) {
	if m == nil {
		return
	}
	m.llmCalls.WithLabelValues(role).Inc()
	m.tokens.WithLabelValues(role, "input").Add(float64(in))
	m.tokens.WithLabelValues(role, "output").Add(float64(out))
}

// ToolCall records one tool call.
func (m *Metrics) ToolCall(tool string, failed bool) {
	if m == nil {
		return
	}
	outcome := "ok"
	if failed {
		outcome = "error"
	}
	m.tools.WithLabelValues(tool, outcome).Inc()
}

// Signal records one stuck signal.
func (m *Metrics) Signal(pattern, action string) {
	if m == nil {
		return
	}
	m.signals.WithLabelValues(pattern, action).Inc()
}

// Route is another endpoint served beside /metrics (the probes).
type Route struct {
	Path    string
	Handler http.Handler
}

// Serve serves /metrics, and routes, on addr until ctx ends. It returns
// once the listener is open so that a port in use is reported at start; a
// later failure is logged and the process goes on without metrics.
func (m *Metrics) Serve(ctx context.Context, addr string, log *zap.Logger, routes ...Route) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	for _, r := range routes {
		mux.Handle(r.Path, r.Handler)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", zap.Error(err))
		}
	}()
	return "http://" + ln.Addr().String() + "/metrics", nil
}
