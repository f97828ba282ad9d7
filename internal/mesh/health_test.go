package mesh_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/meshtest/meshconfig"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/health"
)

// eventually polls probe until it reports want or a minute passes.
func eventually(t *testing.T, what string, probe func(context.Context) health.Report, want bool) health.Report {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rep := probe(context.Background())
		if rep.OK() == want {
			return rep
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s: %s", what, rep.Status, rep.Failing())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A stop logs "service stopping" with its reason and the events in hand,
// then "service stopped" with what was left for another replica; /readyz
// says stopping while the services drain, and /healthz stays alive.
func TestShutdownLinesAndProbes(t *testing.T) {
	cfg := meshconfig.New(t)
	// A model that takes the call and never answers: the step is in
	// flight when the stop comes.
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer llm.Close()
	defer close(release)
	cfg.LLM.BaseURL = llm.URL + "/v1"
	cfg.LLM.MaxRetries = 0
	// A short grace, so the step is still in hand when the stop is logged
	// (with none, the handler could unwind before the "stopping" line
	// counts it), and then interrupted: the model never answers.
	cfg.Stream.DrainTimeout = 3 * time.Second
	// Long enough that the step is not redelivered while it hangs (on a
	// loaded machine a late heartbeat would let JetStream hand it to the
	// same replica again, and two would be in flight).
	cfg.Stream.AckWait = time.Minute
	core, logs := observer.New(zap.InfoLevel)
	m, err := mesh.Start(context.Background(), cfg, zap.New(core), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	if rep := m.Health.Readiness(context.Background()); rep.OK() || rep.Failing() != "services: no service started yet" {
		t.Fatalf("before any service: %+v", rep)
	}
	ctx, stop := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.RunServices(ctx, "builder") }()
	rep := eventually(t, "readiness", m.Health.Readiness, true)
	if got := names(rep); got != "nats redis consumer builder" {
		t.Fatalf("ready checks %q", got)
	}

	env, err := events.New(events.SessionStarted, "hs-1", "", 0, time.Now(), events.SessionStartedData{
		PRD: parsePRD(t, "tasks:\n  - {id: T1, title: Wait, acceptance_criteria: [never]}\n"), Workspace: workspace(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Bus.Publish(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the builder never called the model")
	}
	// The session's start may still be finishing (its index write, its
	// ack) when the step calls the model: stop once the step is all that
	// is in hand.
	for deadline := time.Now().Add(time.Minute); ; {
		msg, err := m.Bus.Conn().Request(mesh.StatusSubject(cfg.Prefix, "builder"), nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var st mesh.Status
		if err := json.Unmarshal(msg.Data, &st); err != nil {
			t.Fatal(err)
		}
		if st.InFlight == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events in hand, want the hung step alone", st.InFlight)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop(errors.New("told to stop"))
	if err := <-done; err != nil {
		t.Fatalf("RunServices: %v", err)
	}

	stopping := logs.FilterMessage("service stopping").All()
	stopped := logs.FilterMessage("service stopped").All()
	if len(stopping) != 1 || len(stopped) != 1 {
		t.Fatalf("%d stopping and %d stopped lines, want 1 each; all: %v", len(stopping), len(stopped), logs.All())
	}
	for k, want := range map[string]any{"reason": "told to stop", "in_flight": int64(1)} {
		if got := stopping[0].ContextMap()[k]; got != want {
			t.Errorf("stopping %s = %v, want %v", k, got, want)
		}
	}
	for k, want := range map[string]any{"reason": "told to stop", "in_flight": int64(1), "interrupted": int64(1)} {
		if got := stopped[0].ContextMap()[k]; got != want {
			t.Errorf("stopped %s = %v, want %v", k, got, want)
		}
	}
	if rep := m.Health.Readiness(context.Background()); rep.OK() || !strings.Contains(rep.Failing(), "process: stopping: told to stop") {
		t.Fatalf("after the stop, readiness %q", rep.Failing())
	}
	if rep := m.Health.Liveness(context.Background()); !rep.OK() {
		t.Fatalf("after a clean stop, liveness %q", rep.Failing())
	}
}

// Readiness follows the connections: Redis that stops answering and a NATS
// connection closed for good; the latter also fails liveness.
func TestProbesFollowTheConnections(t *testing.T) {
	cfg := meshconfig.New(t)
	cfg.LLM.BaseURL = "http://127.0.0.1:1/v1" // never called
	mr := miniredis.RunT(t)
	cfg.Redis.URL = "redis://" + mr.Addr()
	m, err := mesh.Start(context.Background(), cfg, zap.NewNop(), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.RunServices(ctx, "stuckdetector") }()
	defer func() { stop(); <-done }()
	eventually(t, "readiness", m.Health.Readiness, true)

	mr.Close()
	rep := eventually(t, "readiness without Redis", m.Health.Readiness, false)
	if !strings.HasPrefix(rep.Failing(), "redis: ping: ") {
		t.Fatalf("without Redis: %q", rep.Failing())
	}
	if rep := m.Health.Liveness(context.Background()); !rep.OK() {
		t.Fatalf("Redis away is not a reason to restart: %q", rep.Failing())
	}
	m.Bus.Conn().Close()
	rep = m.Health.Readiness(context.Background())
	if !strings.Contains(rep.Failing(), "nats: connection closed") {
		t.Fatalf("NATS closed, readiness: %q", rep.Failing())
	}
	if rep := m.Health.Liveness(context.Background()); rep.Failing() != "nats: connection closed for good" {
		t.Fatalf("NATS closed, liveness: %q", rep.Failing())
	}
}

// The backlog gauges are JetStream's numbers for the service's consumer,
// read at scrape time: events published while nobody consumes are pending.
func TestBacklogGaugesFromJetStream(t *testing.T) {
	cfg := meshconfig.New(t)
	cfg.LLM.BaseURL = "http://127.0.0.1:1/v1" // never called
	m, err := mesh.Start(context.Background(), cfg, zap.NewNop(), mesh.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// The consumer is made by the service's first run, and stays.
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.RunServices(ctx, "builder") }()
	eventually(t, "readiness", m.Health.Readiness, true)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		env, err := events.New(events.SessionResumed, "bl-"+string(rune('a'+i)), "", 1, time.Now(), events.SessionResumedData{Message: "go on"})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Bus.Publish(context.Background(), env); err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := m.Metrics.Serve(sctx, "127.0.0.1:0", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The stopped replica's last pull request may still be open on the
	// server, which then hands it events nobody will ack: they count as
	// ack-pending instead of pending. The backlog is the sum either way.
	pending, ackPending := gauge(t, body, "ralph_consumer_pending", "builder"), gauge(t, body, "ralph_consumer_ack_pending", "builder")
	if up := gauge(t, body, "ralph_consumer_info_up", "builder"); up != 1 || pending+ackPending != 3 {
		t.Fatalf("builder's consumer: up %v, pending %v + ack pending %v, want 3 in all", up, pending, ackPending)
	}
	if r := gauge(t, body, "ralph_consumer_redelivered", "builder"); r != 0 {
		t.Fatalf("redelivered %v", r)
	}
}

// gauge is the value of name{consumer="consumer"} in a /metrics body.
func gauge(t *testing.T, body []byte, name, consumer string) float64 {
	t.Helper()
	prefix := name + `{consumer="` + consumer + `"} `
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", strings.TrimSpace(prefix))
	return 0
}

func names(rep health.Report) string {
	var s []string
	for _, c := range rep.Checks {
		s = append(s, c.Name)
	}
	return strings.Join(s, " ")
}
