package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/health"
)

func TestLocalProbeURL(t *testing.T) {
	for _, c := range []struct{ addr, service, want string }{
		{"127.0.0.1", "", "http://127.0.0.1:9464/readyz"},
		{"127.0.0.1", "critic", "http://127.0.0.1:9465/readyz"},
		{"127.0.0.1", "console", "http://127.0.0.1:9470/readyz"},
		{":9464", "critic", "http://127.0.0.1:9464/readyz"},
		{"0.0.0.0", "pruner", "http://127.0.0.1:9467/readyz"},
		{"[::]:9500", "", "http://[::1]:9500/readyz"},
		{"10.1.2.3:9999", "builder", "http://10.1.2.3:9999/readyz"},
	} {
		got, err := localProbeURL(c.addr, c.service, "/readyz")
		if err != nil || got != c.want {
			t.Errorf("localProbeURL(%q, %q) = %q, %v; want %q", c.addr, c.service, got, err, c.want)
		}
	}
}

func TestHealthBadInput(t *testing.T) {
	t.Setenv("RALPH_METRICS_ADDR", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"health", "nosuch"}, `unknown service "nosuch"`},
		{[]string{"health", "--url", "ftp://host/readyz"}, "not an http:// or https:// URL"},
		{[]string{"health", "--timeout", "0s", "--url", "http://127.0.0.1:1/readyz"}, "--timeout 0s: must be positive"},
		{[]string{"health", "builder"}, "RALPH_METRICS_ADDR is empty"},
	} {
		if _, code, err := ralph(t, c.args...); code != 2 || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, err %v; want 2 and %q", c.args, code, err, c.want)
		}
	}
}

// Not ready, and nothing listening, are exit 1 with why.
func TestHealthNotReady(t *testing.T) {
	srv := httptest.NewServer(health.New(0).ReadyHandler())
	defer srv.Close()
	if _, code, err := ralph(t, "health", "--url", srv.URL); code != 1 || err == nil ||
		err.Error() != "not ready: services: no service started yet ("+srv.URL+")" {
		t.Fatalf("not ready: exit %d, err %v", code, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := l.Addr().String()
	l.Close()
	if _, code, err := ralph(t, "health", "--url", "http://"+free+"/readyz"); code != 1 || err == nil || !strings.Contains(err.Error(), "no answer from") {
		t.Fatalf("nothing listening: exit %d, err %v", code, err)
	}
}

// `ralph health` finds `ralph up` from RALPH_METRICS_ADDR alone and says
// ready once every service's consumer is bound; /healthz answers too.
func TestHealthOfUp(t *testing.T) {
	upEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t.Setenv("RALPH_METRICS_ADDR", addr)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRoot()
	root.SetOut(new(strings.Builder))
	root.SetErr(new(strings.Builder))
	root.SetArgs([]string{"up"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	deadline := time.Now().Add(60 * time.Second)
	var out string
	var code int
	for {
		out, code, err = ralph(t, "health")
		if code == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("up ended: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if code != 0 {
		t.Fatalf("up never ready: exit %d, %v", code, err)
	}
	for _, want := range []string{"ready: ", "nats", "redis", "consumer builder", "consumer summarizer", "consumer console"} {
		if !strings.Contains(out, want) {
			t.Errorf("health printed %q, without %q", out, want)
		}
	}
	if out, code, err := ralph(t, "health", "--live"); code != 0 || !strings.HasPrefix(out, "alive: nats, loop builder") {
		t.Errorf("--live: exit %d, %v, %q", code, err, out)
	}
	// `ralph up` reports the backlog of every service's consumer.
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, c := range []string{"builder", "critic", "stuckdetector", "pruner", "decomposer", "summarizer"} {
		for _, want := range []string{`ralph_consumer_info_up{consumer="` + c + `"} 1`, `ralph_consumer_pending{consumer="` + c + `"} 0`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	}
	if strings.Contains(string(body), `consumer="console"`) {
		t.Error("/metrics has a backlog for the console, which has no durable consumer")
	}
	cancel()
	if err := <-done; err != nil && !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("up after cancel: %v", err)
	}
}
