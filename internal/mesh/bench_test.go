package mesh_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// BenchmarkStep measures one step of the loop through the mesh with an
// instantly answering scripted model: from iteration.requested (published
// by the builder) to iteration.analyzed (published by the stuck detector),
// which covers the builder's LLM call over HTTP, its Redis journal and
// context writes, the workspace hash, iteration.completed on JetStream and
// the detector's Redis window. Each of b.N tasks takes one step and one
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
	m := h.mesh()
	h.run(m, "builder", "critic", "stuckdetector")

	var tasks strings.Builder
	tasks.WriteString("tasks:\n")
	for i := 0; i < b.N; i++ {
		fmt.Fprintf(&tasks, "  - {id: T%d, title: task %d, acceptance_criteria: [done]}\n", i, i)
	}
	p := parsePRD(b, tasks.String())
	ws := b.TempDir()
	b.ResetTimer()
	h.start(m, "bench-step", p, ws)
	got := h.wait(m, "bench-step")
	b.StopTimer()
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
}
