package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/health"
)

func get(t *testing.T, h http.Handler) (int, health.Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var rep health.Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	return rec.Code, rep
}

// Readiness walks the life of a process: nothing started, a consumer not
// bound, a dependency down, everything good, then shutting down.
func TestReadinessFollowsTheProcess(t *testing.T) {
	h := health.New(0)
	var redisDown error = errors.New("ping: connection refused")
	h.Ready("nats", func(context.Context) error { return nil })
	h.Ready("redis", func(context.Context) error { return redisDown })

	steps := []struct {
		do      func()
		code    int
		failing string
	}{
		{func() {}, 503, "redis: ping: connection refused; services: no service started yet"},
		{func() { redisDown = nil; h.Starting("builder"); h.Starting("critic") }, 503, "consumer builder: not bound yet; consumer critic: not bound yet"},
		{func() { h.Bound("builder") }, 503, "consumer critic: not bound yet"},
		{func() { h.Bound("critic") }, 200, ""},
		{func() { h.Stopping(errors.New("terminated signal received")) }, 503, "process: stopping: terminated signal received"},
	}
	for i, s := range steps {
		s.do()
		code, rep := get(t, h.ReadyHandler())
		if code != s.code || rep.Failing() != s.failing {
			t.Fatalf("step %d: %d %q, want %d %q", i, code, rep.Failing(), s.code, s.failing)
		}
		if want := map[bool]string{true: "ready", false: "not ready"}[s.code == 200]; rep.Status != want {
			t.Fatalf("step %d: status %q, want %q", i, rep.Status, want)
		}
	}
}

// A run loop that ends while the process is not stopping is a process to
// restart; one that ends during a shutdown is not.
func TestLivenessFailsOnlyOnWhatDoesNotHeal(t *testing.T) {
	h := health.New(0)
	closed := false
	h.Live("nats", func(context.Context) error {
		if closed {
			return errors.New("connection closed")
		}
		return nil
	})
	h.Starting("builder")
	if code, rep := get(t, h.LiveHandler()); code != 200 || rep.Status != "alive" {
		t.Fatalf("starting: %d %+v", code, rep)
	}
	h.Ended("builder", errors.New("consumer deleted"))
	if code, rep := get(t, h.LiveHandler()); code != 503 || rep.Failing() != "loop builder: run loop ended: consumer deleted" {
		t.Fatalf("loop ended: %d %q", code, rep.Failing())
	}

	h2 := health.New(0)
	h2.Bound("critic")
	h2.Stopping(nil)
	h2.Ended("critic", nil)
	if code, rep := get(t, h2.LiveHandler()); code != 200 {
		t.Fatalf("ended during shutdown: %d %q, want alive", code, rep.Failing())
	}
	h2.Live("nats", func(context.Context) error { return errors.New("connection closed") })
	if code, rep := get(t, h2.LiveHandler()); code != 503 || rep.Failing() != "nats: connection closed" {
		t.Fatalf("nats closed: %d %q", code, rep.Failing())
	}
}

// A check that hangs is cut off by the timeout and reported, and the probe
// answers.
func TestCheckTimeout(t *testing.T) {
	h := health.New(1) // one nanosecond
	h.Ready("redis", func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	h.Bound("pruner")
	code, rep := get(t, h.ReadyHandler())
	if code != 503 || rep.Failing() != "redis: context deadline exceeded" {
		t.Fatalf("%d %q", code, rep.Failing())
	}
}

func TestOnlyGetAndHead(t *testing.T) {
	rec := httptest.NewRecorder()
	health.New(0).ReadyHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/readyz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", rec.Code)
	}
}

func TestProbe(t *testing.T) {
	h := health.New(0)
	mux := http.NewServeMux()
	mux.Handle("/readyz", h.ReadyHandler())
	mux.HandleFunc("/other", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello")) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := context.Background()

	rep, err := health.Probe(ctx, srv.Client(), srv.URL+"/readyz")
	if err != nil || rep.OK() || rep.Failing() != "services: no service started yet" {
		t.Fatalf("not ready: %+v, %v", rep, err)
	}
	h.Bound("console")
	if rep, err := health.Probe(ctx, srv.Client(), srv.URL+"/readyz"); err != nil || !rep.OK() {
		t.Fatalf("ready: %+v, %v", rep, err)
	}
	if _, err := health.Probe(ctx, srv.Client(), srv.URL+"/other"); err == nil || !strings.Contains(err.Error(), "without a health report") {
		t.Fatalf("not a report: %v", err)
	}
	srv.Close()
	if _, err := health.Probe(ctx, srv.Client(), srv.URL+"/readyz"); err == nil {
		t.Fatal("nothing listening: want an error")
	}
}
