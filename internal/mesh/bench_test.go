package mesh_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/store"
)

// BenchmarkStep measures one step of the loop through the mesh with an
// instantly answering scripted model: from iteration.requested (published
// by the builder) to iteration.analyzed (published by the stuck detector),
// which covers the builder's LLM call over HTTP, its Redis journal and
// context writes, the workspace hash, iteration.completed on JetStream and
// the detector's Redis window. It reports the Redis round trips of the
// whole mesh per step (each step here includes a task's start and its
// critic review). Each of b.N tasks takes one step and one
// critic review, so the step is measured without stuck signals.
//
//	bash scripts/test.sh bench   (or: go test -run '^$' -bench BenchmarkStep ./internal/mesh/)
func BenchmarkStep(b *testing.B) {
	h := newHarness(b, parseScript(b, `
rules:
  - {model: builder, reply: {content: "Done: nothing was needed."}}
  - {model: critic, reply: {content: '{"approved": true, "feedback": "ok"}'}}
`))
	h.cfg.Stream.AckWait = 30 * time.Second
	// Every task takes one iteration: the session must be allowed b.N.
	h.cfg.Builder.MaxIterations = max(h.cfg.Builder.MaxIterations, b.N)
	m := h.mesh()
	// Every Redis round trip of the mesh (builder, critic, detector and
	// the model usage) counts towards the steps'.
	var trips store.RoundTrips
	m.Store.Client().AddHook(&trips)
	h.run(m, "builder", "critic", "stuckdetector")

	var tasks strings.Builder
	tasks.WriteString("tasks:\n")
	for i := 0; i < b.N; i++ {
		fmt.Fprintf(&tasks, "  - {id: T%d, title: task %d, acceptance_criteria: [done]}\n", i, i)
	}
	p := parsePRD(b, tasks.String())
	ws := b.TempDir()
	b.ResetTimer()
	before := trips.Count()
	h.start(m, "bench-step", p, ws)
	got := h.wait(m, "bench-step")
	b.StopTimer()
	roundTrips := trips.Count() - before
	if last := got[len(got)-1]; last.Type != events.SessionCompleted {
		b.Fatalf("session ended with %s: %s", last.Type, last.Data)
	}
	requested := map[int]time.Time{}
	var steps []time.Duration
	for _, env := range got {
		switch env.Type {
		case events.IterationRequested:
			requested[env.Step] = env.Time
		case events.IterationAnalyzed:
			steps = append(steps, env.Time.Sub(requested[env.Step]))
		}
	}
	slices.Sort(steps)
	pct := func(p float64) time.Duration { return steps[min(len(steps)-1, int(p*float64(len(steps))))] }
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-step-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-step-ms")
	b.ReportMetric(float64(len(steps)), "steps")
	b.ReportMetric(float64(roundTrips)/float64(len(steps)), "redis-rt/step")
}

// BenchmarkAPIEvents reads a session of 5,000 stored events through the
// console's server-sent event stream (what the web page does) and reports
// events/s; the target is at least 5,000.
func BenchmarkAPIEvents(b *testing.B) {
	const n = 5000
	h := newHarness(b, parseScript(b, "rules: [{reply: {content: done}}]"))
	srv, m := apiServer(b, h)
	ctx := context.Background()
	for step := 1; step <= n; step++ {
		env := events.Must(events.IterationCompleted, "sse-bench", "T1", step, time.Now(), events.IterationRecord{Iteration: step}).For("web")
		if step == 1 {
			env = events.Must(events.SessionStarted, "sse-bench", "", 0, time.Now(), events.SessionStartedData{
				PRD: parsePRD(b, "tasks: [{id: T1, title: t, acceptance_criteria: [c]}]"), Workspace: "/ws"}).For("web")
		}
		if err := m.Bus.Publish(ctx, env); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/sessions/sse-bench/events", nil)
		req.Header.Set("Authorization", "Bearer "+webToken)
		rctx, cancel := context.WithCancel(ctx)
		resp, err := srv.Client().Do(req.WithContext(rctx))
		if err != nil {
			b.Fatal(err)
		}
		r := bufio.NewReader(resp.Body)
		for seen := 0; seen < n; {
			line, err := r.ReadString('\n')
			if err != nil {
				b.Fatalf("after %d events: %v", seen, err)
			}
			if strings.HasPrefix(line, "data: ") {
				seen++
			}
		}
		cancel()
		resp.Body.Close()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
}
