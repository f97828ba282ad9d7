package metrics

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
)

func TestCountersAndServe(t *testing.T) {
	m := New()
	m.Handled("builder", "iteration.requested", "ack", 20*time.Millisecond)
	m.Handled("builder", "iteration.requested", "ack", 10*time.Millisecond)
	m.Handled("critic", "critique.requested", "retry", time.Second)
	m.LLMCall("builder", 100, 7)
	m.ToolCall("run", true)
	m.Signal("circular_tools", "prune_context")

	if got := testutil.ToFloat64(m.handled.WithLabelValues("builder", "iteration.requested", "ack")); got != 2 {
		t.Fatalf("acks %v", got)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("builder", "input")); got != 100 {
		t.Fatalf("input tokens %v", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := m.Serve(ctx, "127.0.0.1:0", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`ralph_events_handled_total{outcome="ack",service="builder",type="iteration.requested"} 2`,
		`ralph_llm_tokens_total{direction="output",role="builder"} 7`,
		`ralph_tool_calls_total{outcome="error",tool="run"} 1`,
		`ralph_stuck_signals_total{action="prune_context",pattern="circular_tools"} 1`,
		`ralph_handler_duration_seconds_count{service="critic",type="critique.requested"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.Handled("a", "b", "ack", 0)
	m.LLMCall("a", 1, 1)
	m.ToolCall("a", false)
	m.Signal("a", "b")
}

func TestServeReportsABusyAddress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := New().Serve(ctx, "127.0.0.1:0", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")
	if _, err := New().Serve(ctx, addr, zap.NewNop()); err == nil {
		t.Fatal("a second listener on the same address must fail")
	}
}
