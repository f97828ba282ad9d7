package compaction

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/units"
)

// tieDoc has three tool traces kept as artifacts whose pointers have
// identical scores (t-a, t-b, t-c) and a fourth, more recent and so more
// harmful, that is not tied (t-d). At half the limit the target needs two
// of the tied ones: which two is the advisor's call.
func tieDoc() Document {
	doc := newDoc(6000, 10, "fix the failing build").
		tool("t-a", 3, "run", runArgs("make a"), 20, 1000, "log a").
		tool("t-b", 3, "run", runArgs("make b"), 20, 1000, "log b").
		tool("t-c", 3, "run", runArgs("make c"), 20, 1000, "log c").
		tool("t-d", 7, "run", runArgs("make d"), 20, 1000, "log d").
		msg("assistant-10", "assistant", 10, 50, "Next.").
		build()
	for i, u := range doc.Units {
		if u.Kind == units.KindToolResult {
			doc.Units[i].Artifact = "art-" + u.ID
		}
	}
	return doc
}

// tieOptions are the default options at half the limit, which tieDoc is
// sized for.
func tieOptions() Options { return opts(halfTarget) }

// withAdvisor is tieOptions with the advisor enabled.
func withAdvisor(mut func(*Options)) Options {
	return opts(func(o *Options) {
		halfTarget(o)
		o.Advisor = true
		if mut != nil {
			mut(o)
		}
	})
}

func candidateIDs(cs []Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

func TestAdvisorOnlyReordersNearTies(t *testing.T) {
	baseline := mustPlan(t, tieDoc(), tieOptions(), History{})
	if got := opUnits(baseline); !slices.Equal(got, []string{"t-a", "t-b"}) {
		t.Fatalf("baseline ops %v, want t-a, t-b (document order breaks the tie)", got)
	}
	if baseline.Advisor.Status != AdvisorOff || len(baseline.NearTies) != 0 {
		t.Errorf("no advisor: report %+v, near ties %v", baseline.Advisor, baseline.NearTies)
	}

	// With the advisor on, Plan asks the question and changes nothing.
	o := withAdvisor(nil)
	h := History{Iteration: 3}
	pending := mustPlan(t, tieDoc(), o, h)
	if pending.Advisor.Status != AdvisorPending || pending.Advisor.Called {
		t.Errorf("plan with near ties: report %+v, want pending and not called", pending.Advisor)
	}
	if !reflect.DeepEqual(pending.Ops, baseline.Ops) || !reflect.DeepEqual(pending.Skipped, baseline.Skipped) {
		t.Errorf("a pending plan differs from the one without an advisor: ops %v", opUnits(pending))
	}
	for _, c := range pending.NearTies {
		if c.Lane != LaneToolTrace || c.Op != OpReplaceWithPointer || c.TokensSaved != 940 {
			t.Errorf("candidate %+v", c)
		}
	}
	if got := candidateIDs(pending.NearTies); !slices.Equal(got, []string{"t-a", "t-b", "t-c"}) {
		t.Errorf("near ties %v: only the tied t-a, t-b, t-c (not t-d, not protected units)", got)
	}

	r := ApplyAdvice(tieDoc(), o, h, pending, []byte(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "least_recent_use"},
		{"candidate_id": "t-b", "priority": 2, "rationale_tag": "stale_trace"}]`))
	if got := opUnits(r); !slices.Equal(got, []string{"t-c", "t-b"}) {
		t.Errorf("advised ops %v, want t-c, t-b", got)
	}
	want := AdvisorReport{Status: AdvisorUsed, Called: true, Candidates: []string{"t-a", "t-b", "t-c"}, Order: []string{"t-c", "t-b", "t-a"}}
	if !reflect.DeepEqual(r.Advisor, want) {
		t.Errorf("report %+v, want %+v", r.Advisor, want)
	}
	// Nothing but the order of the tied ops changed.
	if r.TokensAfter != baseline.TokensAfter || !reflect.DeepEqual(r.Skipped, baseline.Skipped) {
		t.Errorf("advice changed more than the order")
	}
	// ApplyAdvice is pure: the pending plan it was given is unchanged.
	if pending.Advisor.Status != AdvisorPending || !slices.Equal(opUnits(pending), []string{"t-a", "t-b"}) {
		t.Errorf("ApplyAdvice changed its input: %+v", pending.Advisor)
	}

	// The object form is accepted too.
	pending = mustPlan(t, tieDoc(), o, History{})
	r = ApplyAdvice(tieDoc(), o, History{}, pending, []byte(`{"ranking": [{"candidate_id": "t-b", "priority": 1, "rationale_tag": "x"}]}`))
	if got := opUnits(r); !slices.Equal(got, []string{"t-b", "t-a"}) {
		t.Errorf("object-wrapped advice: ops %v, want t-b, t-a", got)
	}
}

func TestAdvisorFailuresChangeNothing(t *testing.T) {
	o := withAdvisor(func(o *Options) { o.AdvisorTimeout = 20 * time.Millisecond })
	pending := mustPlan(t, tieDoc(), o, History{})
	if pending.Advisor.Status != AdvisorPending {
		t.Fatalf("report %+v, want pending", pending.Advisor)
	}
	failed := func(err error) func() Result {
		return func() Result { return AdviceFailed(pending, err, o.AdvisorTimeout) }
	}
	answered := func(answer string) func() Result {
		return func() Result { return ApplyAdvice(tieDoc(), o, History{}, pending, []byte(answer)) }
	}
	tests := []struct {
		name   string
		settle func() Result
		reason string
	}{
		{"error", failed(errors.New("model endpoint returned 503")), "error: model endpoint returned 503"},
		{"timeout", failed(context.DeadlineExceeded), "timeout after 20ms"},
		{"timeout wrapped by the client", failed(fmt.Errorf("chat: %w", context.DeadlineExceeded)), "timeout after 20ms"},
		{"garbage", answered(`I would compact t-c first.`), "invalid: bad JSON"},
		{"empty", answered(""), "invalid: empty answer"},
		{"code fence", answered("```json\n[{\"candidate_id\": \"t-c\", \"priority\": 1, \"rationale_tag\": \"x\"}]\n```"), "invalid: bad JSON"},
		{"trailing text", answered(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "x"}] done`), "invalid: bad JSON: invalid character 'd' after top-level value"},
		{"a string", answered(`"t-c first"`), "invalid: want a JSON array or object, got string"},
		{"adds a candidate that is not tied", answered(`[{"candidate_id": "t-d", "priority": 1, "rationale_tag": "x"}]`), `invalid: ranking[0]: field candidate_id: "t-d" is not a candidate`},
		{"adds a protected unit", answered(`[{"candidate_id": "system", "priority": 1, "rationale_tag": "x"}]`), `"system" is not a candidate`},
		{"unknown field", answered(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "x", "why": "y"}]`), "field why: unknown field"},
		{"missing field", answered(`[{"candidate_id": "t-c", "priority": 1}]`), "field rationale_tag: required"},
		{"priority as string", answered(`[{"candidate_id": "t-c", "priority": "1", "rationale_tag": "x"}]`), "field priority: want integer, got string"},
		{"priority zero", answered(`[{"candidate_id": "t-c", "priority": 0, "rationale_tag": "x"}]`), "field priority: must be at least 1"},
		{"ranked twice", answered(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "x"}, {"candidate_id": "t-c", "priority": 2, "rationale_tag": "x"}]`), "ranked twice"},
		{"bad tag", answered(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "Because It Is Old"}]`), "field rationale_tag"},
		{"empty ranking", answered(`{"ranking": []}`), "invalid: empty ranking"},
		{"wrapper without ranking", answered(`{"order": []}`), "invalid: bad JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.settle()
			if r.Advisor.Status != AdvisorIgnored || !r.Advisor.Called {
				t.Errorf("status %+v, want ignored after a call", r.Advisor)
			}
			if !strings.Contains(r.Advisor.Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", r.Advisor.Reason, tt.reason)
			}
			if !reflect.DeepEqual(r.Ops, pending.Ops) || !reflect.DeepEqual(r.Skipped, pending.Skipped) || r.TokensAfter != pending.TokensAfter {
				t.Errorf("a failed advisor changed the plan: ops %v, want %v", opUnits(r), opUnits(pending))
			}
			if !slices.Equal(r.Advisor.Candidates, pending.Advisor.Candidates) {
				t.Errorf("candidates %v, want %v", r.Advisor.Candidates, pending.Advisor.Candidates)
			}
		})
	}
}

// TestApplyAdviceAnswersOnlyItsQuestion: advice is only folded into the
// pending plan it answers, made from the same document.
func TestApplyAdviceAnswersOnlyItsQuestion(t *testing.T) {
	answer := []byte(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "x"}]`)
	o := withAdvisor(nil)
	pending := mustPlan(t, tieDoc(), o, History{})
	// Another document: t-c is no longer tied.
	other := tieDoc()
	setTokens(other, "t-c", 600)
	r := ApplyAdvice(other, o, History{}, pending, answer)
	if r.Advisor.Status != AdvisorIgnored || !strings.Contains(r.Advisor.Reason, "does not match the document") {
		t.Errorf("advice on another document: report %+v", r.Advisor)
	}
	if !reflect.DeepEqual(r.Ops, pending.Ops) {
		t.Errorf("advice on another document changed the plan: %v", opUnits(r))
	}
	// A plan that asked nothing is returned as it is.
	off := mustPlan(t, tieDoc(), tieOptions(), History{})
	if got := ApplyAdvice(tieDoc(), tieOptions(), History{}, off, answer); !reflect.DeepEqual(got, off) {
		t.Errorf("ApplyAdvice on a plan without a question: %+v", got.Advisor)
	}
	if got := AdviceFailed(off, errors.New("x"), time.Second); !reflect.DeepEqual(got, off) {
		t.Errorf("AdviceFailed on a plan without a question: %+v", got.Advisor)
	}
}

func TestAdvisorIsAskedOnlyWhenItMatters(t *testing.T) {
	answer := []byte(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "x"}]`)
	t.Run("once per iteration", func(t *testing.T) {
		o := withAdvisor(nil)
		r := mustPlan(t, tieDoc(), o, History{Iteration: 4, AdvisorUsedIteration: 4})
		if r.Advisor.Status != AdvisorAlreadyUsed || len(r.NearTies) != 0 {
			t.Errorf("report %+v, near ties %v", r.Advisor, r.NearTies)
		}
		for name, settle := range map[string]func(Result, History) Result{
			"answered": func(r Result, h History) Result { return ApplyAdvice(tieDoc(), o, h, r, answer) },
			"failed":   func(r Result, _ History) Result { return AdviceFailed(r, errors.New("503"), o.AdvisorTimeout) },
		} {
			h := History{Iteration: 4}
			r = settle(mustPlan(t, tieDoc(), o, h), h)
			h.Commit(r)
			if h.AdvisorUsedIteration != 4 {
				t.Errorf("%s: Commit did not record the consultation: %+v", name, h)
			}
			if again := mustPlan(t, tieDoc(), o, h); again.Advisor.Status != AdvisorAlreadyUsed || len(again.NearTies) != 0 {
				t.Errorf("%s: asked twice in one iteration: %+v", name, again.Advisor)
			}
		}
	})
	t.Run("no near tie", func(t *testing.T) {
		doc := tieDoc()
		setTokens(doc, "t-b", 1500)
		setTokens(doc, "t-c", 600)
		r := mustPlan(t, doc, withAdvisor(nil), History{})
		if r.Advisor.Status != AdvisorNotNeeded || len(r.NearTies) != 0 {
			t.Errorf("report %+v, near ties %v", r.Advisor, r.NearTies)
		}
	})
	t.Run("a wider epsilon takes in the fourth", func(t *testing.T) {
		r := mustPlan(t, tieDoc(), withAdvisor(func(o *Options) { o.AdvisorEpsilon = 0.5 }), History{})
		if len(r.NearTies) != 4 {
			t.Errorf("asks about %d candidates, want 4", len(r.NearTies))
		}
		r = mustPlan(t, tieDoc(), withAdvisor(func(o *Options) { o.AdvisorEpsilon = 0.5; o.AdvisorTopK = 2 }), History{})
		if len(r.NearTies) != 2 {
			t.Errorf("asks about %d candidates, AdvisorTopK 2", len(r.NearTies))
		}
	})
	t.Run("off without Advisor, outside tiered_adaptive and with AdvisorTopK below 2", func(t *testing.T) {
		for _, o := range []Options{
			tieOptions(),
			withAdvisor(func(o *Options) { o.Mode = ModeTiered }),
			withAdvisor(func(o *Options) { o.Mode = ModeLegacy }),
			withAdvisor(func(o *Options) { o.AdvisorTopK = 0 }),
		} {
			r := mustPlan(t, tieDoc(), o, History{})
			if r.Advisor.Status != AdvisorOff || len(r.NearTies) != 0 {
				t.Errorf("%s/K=%d/advisor %v: report %+v, near ties %v", o.Mode, o.AdvisorTopK, o.Advisor, r.Advisor, r.NearTies)
			}
		}
	})
	t.Run("not under the normal tier", func(t *testing.T) {
		doc := tieDoc()
		doc.LimitTokens = 100000
		r := mustPlan(t, doc, withAdvisor(nil), History{})
		if r.Advisor.Status != AdvisorNotNeeded || len(r.NearTies) != 0 {
			t.Errorf("report %+v, near ties %v", r.Advisor, r.NearTies)
		}
	})
}

func TestParseAdvice(t *testing.T) {
	cands := []Candidate{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	tests := []struct {
		in   string
		want []string
	}{
		{`[{"candidate_id":"c","priority":1,"rationale_tag":"x"},{"candidate_id":"a","priority":2,"rationale_tag":"y"}]`, []string{"c", "a", "b"}},
		{`[{"candidate_id":"b","priority":3,"rationale_tag":"x"},{"candidate_id":"c","priority":3,"rationale_tag":"y"}]`, []string{"b", "c", "a"}},
		{`  {"ranking":[{"candidate_id":"c","priority":2,"rationale_tag":"x"},{"candidate_id":"b","priority":1,"rationale_tag":"y"}]}  `, []string{"b", "c", "a"}},
	}
	for _, tt := range tests {
		got, err := ParseAdvice([]byte(tt.in), cands)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseAdvice(%s) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}
