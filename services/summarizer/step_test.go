package summarizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/units"
)

// tiedContext has three stale, equally large run results (tool-a, tool-b,
// tool-c at turn 3), a fourth more recent one and a last message. The
// builder kept each output as an artifact, so the planner replaces them by
// pointers, which tie: the order they are applied in is the advisor's
// call.
func tiedContext() []units.Unit {
	us := []units.Unit{
		{ID: "system-T1", Role: "system", Kind: units.KindMessage, Content: "You are the Builder.", Tokens: 100},
		{ID: "task-T1", Role: "user", Kind: units.KindMessage, Content: "Task T1: fix the failing build", Tokens: 100},
	}
	for _, x := range []struct {
		id   string
		turn int
	}{{"a", 3}, {"b", 3}, {"c", 3}, {"d", 7}} {
		args := fmt.Sprintf(`{"command":"make %s"}`, x.id)
		us = append(us,
			units.Unit{ID: "assistant-" + x.id, Role: "assistant", Kind: units.KindMessage, Turn: x.turn, Tokens: 20,
				Calls: []units.Call{{ID: "c" + x.id, Name: "run", Args: args}}},
			units.Unit{ID: "tool-" + x.id, Role: "tool", Kind: units.KindToolResult, Tool: "run", CallID: "c" + x.id,
				Args: json.RawMessage(args), Turn: x.turn, Tokens: 1000, Content: "exit code 0\nlog of " + x.id, Artifact: "art-" + x.id})
	}
	return append(us, units.Unit{ID: "assistant-10", Role: "assistant", Kind: units.KindMessage, Turn: 10, Tokens: 50, Content: "Next."})
}

var tiedRequest = events.CompactionRequestedData{TaskID: "T1", Goal: "T1: fix the failing build", ContextTokens: 4330,
	LimitTokens: 6000, Iteration: 10, Turn: 10}

// advisorScript answers the advisor with answer (after delay, if set) and
// every compaction with a short digest.
func advisorScript(answer, delay string) string {
	d := ""
	if delay != "" {
		d = ", delay: " + delay
	}
	b, _ := json.Marshal(answer)
	return fmt.Sprintf(`
rules:
  - {name: advisor, model: sum, when: {system_contains: "You advise a context compaction planner"}, reply: {content: %s}%s}
  - {name: compact, model: sum, reply: {content: "Build log, nothing failed."}}
`, b, d)
}

// unadvised is the plan the step makes without the advisor, and the near
// ties the advisor is asked about.
func unadvised(t *testing.T, f fixture) (compaction.Result, []compaction.Candidate) {
	t.Helper()
	o := f.exec.Options
	o.Advisor = true
	doc := compaction.Document{LimitTokens: tiedRequest.LimitTokens, CurrentTurn: tiedRequest.Turn,
		Task: compaction.Task{Goal: tiedRequest.Goal}, Units: tiedContext()}
	h := compaction.History{}
	h.StartIteration(tiedRequest.Iteration)
	p, err := compaction.Plan(doc, o, h)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.NearTies) < 2 || len(p.Ops) == 0 {
		t.Fatalf("the tied context gives %d near ties and ops %v", len(p.NearTies), p.Ops)
	}
	return p, p.NearTies
}

func TestCompactAsksTheAdvisorAboutNearTies(t *testing.T) {
	// The advisor puts the last of the tied candidates first.
	probe := newFixture(t, advisorScript("", ""), compaction.ModeTieredAdaptive)
	base, ties := unadvised(t, probe)
	pick := ties[len(ties)-1].ID
	answer := fmt.Sprintf(`[{"candidate_id": %q, "priority": 1, "rationale_tag": "least_needed"}]`, pick)
	f := newFixture(t, advisorScript(answer, ""), compaction.ModeTieredAdaptive)

	var hist compaction.History
	step, err := f.exec.Compact(context.Background(), "s1", tiedRequest, tiedContext(), &hist, true)
	if err != nil {
		t.Fatal(err)
	}
	rep := step.Plan.Advisor
	if rep.Status != compaction.AdvisorUsed || !rep.Called || len(rep.Order) == 0 || rep.Order[0] != pick {
		t.Fatalf("advisor report %+v, want used with %s first", rep, pick)
	}
	if step.Plan.Ops[0].Unit != pick || base.Ops[0].Unit == pick {
		t.Fatalf("ops start with %s (without advice %s), want the advisor's pick %s", step.Plan.Ops[0].Unit, base.Ops[0].Unit, pick)
	}
	if n := f.llm.Hits("advisor"); n != 1 {
		t.Fatalf("advisor asked %d times, want once", n)
	}
	// It was asked about the near ties, and only about them.
	for _, r := range f.llm.Requests() {
		if r.RuleName != "advisor" {
			continue
		}
		var asked []compaction.Candidate
		if err := json.Unmarshal([]byte(r.Messages[len(r.Messages)-1].Content), &asked); err != nil {
			t.Fatalf("advisor request: %v", err)
		}
		if !slices.EqualFunc(asked, ties, func(a, b compaction.Candidate) bool { return a.ID == b.ID }) {
			t.Fatalf("advisor asked about %+v, want the near ties %+v", asked, ties)
		}
	}
	// The plan was carried out and the consultation spent.
	if len(step.Applied) != len(step.Plan.Ops) || step.Applied[0].Unit != pick {
		t.Fatalf("applied %+v", step.Applied)
	}
	if hist.AdvisorUsedIteration != tiedRequest.Iteration {
		t.Fatalf("history %+v does not record the consultation", hist)
	}
	// Asked again in the same iteration (a redelivery): not again.
	if _, err := f.exec.Compact(context.Background(), "s1", tiedRequest, tiedContext(), &hist, true); err != nil {
		t.Fatal(err)
	}
	if n := f.llm.Hits("advisor"); n != 1 {
		t.Fatalf("advisor asked %d times in one iteration", n)
	}
}

func TestCompactWithAFailingAdvisorKeepsThePlan(t *testing.T) {
	cases := []struct {
		name, answer, delay, reason string
	}{
		{"garbage", "Compact tool-c first, it is the oldest.", "", "invalid: bad JSON"},
		{"a candidate that is not tied", `[{"candidate_id": "system-T1", "priority": 1, "rationale_tag": "x"}]`, "", `"system-T1" is not a candidate`},
		{"timeout", `[{"candidate_id": "tool-c", "priority": 1, "rationale_tag": "x"}]`, "30s", "timeout after 100ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, advisorScript(c.answer, c.delay), compaction.ModeTieredAdaptive)
			f.exec.Options.AdvisorTimeout = 100 * time.Millisecond
			base, _ := unadvised(t, f)
			var hist compaction.History
			step, err := f.exec.Compact(context.Background(), "s1", tiedRequest, tiedContext(), &hist, true)
			if err != nil {
				t.Fatal(err)
			}
			rep := step.Plan.Advisor
			if rep.Status != compaction.AdvisorIgnored || !strings.Contains(rep.Reason, c.reason) {
				t.Fatalf("advisor report %+v, want ignored with %q", rep, c.reason)
			}
			if !slices.EqualFunc(step.Plan.Ops, base.Ops, func(a, b compaction.Op) bool { return a.Unit == b.Unit && a.Op == b.Op }) {
				t.Fatalf("ops %v, want the plan without advice %v", step.Plan.Ops, base.Ops)
			}
			if len(step.Applied) != len(base.Ops) || hist.AdvisorUsedIteration != tiedRequest.Iteration {
				t.Fatalf("applied %d ops, history %+v", len(step.Applied), hist)
			}
		})
	}
}

func TestCompactWithoutTheAdvisorAsksNoOne(t *testing.T) {
	f := newFixture(t, advisorScript(`[{"candidate_id": "tool-c", "priority": 1, "rationale_tag": "x"}]`, ""), compaction.ModeTieredAdaptive)
	base, _ := unadvised(t, f)
	var hist compaction.History
	step, err := f.exec.Compact(context.Background(), "s1", tiedRequest, tiedContext(), &hist, false)
	if err != nil {
		t.Fatal(err)
	}
	if f.llm.Hits("advisor") != 0 || step.Plan.Advisor.Status != compaction.AdvisorOff || len(step.Plan.NearTies) != 0 {
		t.Fatalf("advisor off: %d advisor requests, report %+v", f.llm.Hits("advisor"), step.Plan.Advisor)
	}
	if !slices.EqualFunc(step.Plan.Ops, base.Ops, func(a, b compaction.Op) bool { return a.Unit == b.Unit && a.Op == b.Op }) {
		t.Fatalf("ops %v, want %v", step.Plan.Ops, base.Ops)
	}
	if f.llm.Hits("compact") != step.LLMCalls || len(step.Applied) == 0 {
		t.Fatalf("%d compaction requests, %d calls counted, %d ops applied", f.llm.Hits("compact"), step.LLMCalls, len(step.Applied))
	}
}

func TestCompactRefusesAnInvalidRequestForGood(t *testing.T) {
	f := newFixture(t, advisorScript("", ""), compaction.ModeTieredAdaptive)
	req := tiedRequest
	req.LimitTokens = 0
	_, err := f.exec.Compact(context.Background(), "s1", req, tiedContext(), &compaction.History{}, false)
	if err == nil || !strings.Contains(err.Error(), "plan compaction of T1") {
		t.Fatalf("err %v", err)
	}
	if !bus.IsPermanent(err) {
		t.Fatalf("err %v is not permanent", err)
	}
}
