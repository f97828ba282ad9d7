package compaction

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// tieDoc has three tool traces with identical scores (t-a, t-b, t-c) and a
// fourth, more recent and so more harmful, that is not tied (t-d). The
// target needs two of the tied ones: which two is the advisor's call.
func tieDoc() Document {
	return newDoc(6000, 10, "fix the failing build").
		tool("t-a", 3, "run", runArgs("make a"), 20, 1000, "log a").
		tool("t-b", 3, "run", runArgs("make b"), 20, 1000, "log b").
		tool("t-c", 3, "run", runArgs("make c"), 20, 1000, "log c").
		tool("t-d", 7, "run", runArgs("make d"), 20, 1000, "log d").
		msg("assistant-10", "assistant", 10, 50, "Next.").
		build()
}

type advisorFunc func(ctx context.Context, cs []Candidate) ([]byte, error)

func (f advisorFunc) Rank(ctx context.Context, cs []Candidate) ([]byte, error) { return f(ctx, cs) }

func TestAdvisorOnlyReordersNearTies(t *testing.T) {
	baseline := mustPlan(t, tieDoc(), DefaultOptions(), History{}, nil)
	if got := opUnits(baseline); !slices.Equal(got, []string{"t-a", "t-b"}) {
		t.Fatalf("baseline ops %v, want t-a, t-b (document order breaks the tie)", got)
	}
	if baseline.Advisor.Status != AdvisorOff {
		t.Errorf("no advisor: status %q", baseline.Advisor.Status)
	}

	adv := &countingAdvisor{answer: []byte(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "least_recent_use"},
		{"candidate_id": "t-b", "priority": 2, "rationale_tag": "stale_trace"}]`)}
	r := mustPlan(t, tieDoc(), DefaultOptions(), History{Iteration: 3}, adv)
	if got := opUnits(r); !slices.Equal(got, []string{"t-c", "t-b"}) {
		t.Errorf("advised ops %v, want t-c, t-b", got)
	}
	if adv.calls != 1 {
		t.Errorf("advisor called %d times", adv.calls)
	}
	var sent []string
	for _, c := range adv.seen {
		sent = append(sent, c.ID)
		if c.Lane != LaneToolTrace || c.Op != OpCompactToolOutput || c.TokensSaved != 750 {
			t.Errorf("candidate %+v", c)
		}
	}
	if !slices.Equal(sent, []string{"t-a", "t-b", "t-c"}) {
		t.Errorf("advisor asked about %v: only the tied t-a, t-b, t-c (not t-d, not protected units)", sent)
	}
	want := AdvisorReport{Status: AdvisorUsed, Called: true, Candidates: []string{"t-a", "t-b", "t-c"}, Order: []string{"t-c", "t-b", "t-a"}}
	if !reflect.DeepEqual(r.Advisor, want) {
		t.Errorf("report %+v, want %+v", r.Advisor, want)
	}
	// Nothing but the order of the tied ops changed.
	if r.TokensAfter != baseline.TokensAfter || !reflect.DeepEqual(r.Skipped, baseline.Skipped) {
		t.Errorf("advice changed more than the order")
	}

	// The object form is accepted too.
	adv = &countingAdvisor{answer: []byte(`{"ranking": [{"candidate_id": "t-b", "priority": 1, "rationale_tag": "x"}]}`)}
	r = mustPlan(t, tieDoc(), DefaultOptions(), History{}, adv)
	if got := opUnits(r); !slices.Equal(got, []string{"t-b", "t-a"}) {
		t.Errorf("object-wrapped advice: ops %v, want t-b, t-a", got)
	}
}

func TestAdvisorFailuresChangeNothing(t *testing.T) {
	baseline := mustPlan(t, tieDoc(), DefaultOptions(), History{}, nil)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tests := []struct {
		name   string
		adv    Advisor
		reason string
	}{
		{"error", &countingAdvisor{err: errors.New("model endpoint returned 503")}, "error: model endpoint returned 503"},
		{"timeout, advisor ignores its context", advisorFunc(func(context.Context, []Candidate) ([]byte, error) {
			<-release
			return []byte(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "late"}]`), nil
		}), "timeout after 20ms"},
		{"timeout, advisor honours its context", advisorFunc(func(ctx context.Context, _ []Candidate) ([]byte, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}), "timeout after 20ms"},
		{"panic", advisorFunc(func(context.Context, []Candidate) ([]byte, error) { panic("boom") }), "error: advisor panicked: boom"},
		{"garbage", &countingAdvisor{answer: []byte(`I would compact t-c first.`)}, "invalid: bad JSON"},
		{"empty", &countingAdvisor{answer: nil}, "invalid: empty answer"},
		{"code fence", &countingAdvisor{answer: []byte("```json\n[{\"candidate_id\": \"t-c\", \"priority\": 1, \"rationale_tag\": \"x\"}]\n```")}, "invalid: bad JSON"},
		{"trailing text", &countingAdvisor{answer: []byte(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "x"}] done`)}, "invalid: bad JSON: invalid character 'd' after top-level value"},
		{"a string", &countingAdvisor{answer: []byte(`"t-c first"`)}, "invalid: want a JSON array or object, got string"},
		{"adds a candidate that is not tied", &countingAdvisor{answer: []byte(`[{"candidate_id": "t-d", "priority": 1, "rationale_tag": "x"}]`)}, `invalid: ranking[0]: field candidate_id: "t-d" is not a candidate`},
		{"adds a protected unit", &countingAdvisor{answer: []byte(`[{"candidate_id": "system", "priority": 1, "rationale_tag": "x"}]`)}, `"system" is not a candidate`},
		{"unknown field", &countingAdvisor{answer: []byte(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "x", "why": "y"}]`)}, "field why: unknown field"},
		{"missing field", &countingAdvisor{answer: []byte(`[{"candidate_id": "t-c", "priority": 1}]`)}, "field rationale_tag: required"},
		{"priority as string", &countingAdvisor{answer: []byte(`[{"candidate_id": "t-c", "priority": "1", "rationale_tag": "x"}]`)}, "field priority: want integer, got string"},
		{"priority zero", &countingAdvisor{answer: []byte(`[{"candidate_id": "t-c", "priority": 0, "rationale_tag": "x"}]`)}, "field priority: must be at least 1"},
		{"ranked twice", &countingAdvisor{answer: []byte(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "x"}, {"candidate_id": "t-c", "priority": 2, "rationale_tag": "x"}]`)}, "ranked twice"},
		{"bad tag", &countingAdvisor{answer: []byte(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "Because It Is Old"}]`)}, "field rationale_tag"},
		{"empty ranking", &countingAdvisor{answer: []byte(`{"ranking": []}`)}, "invalid: empty ranking"},
		{"wrapper without ranking", &countingAdvisor{answer: []byte(`{"order": []}`)}, "invalid: bad JSON"},
	}
	o := opts(func(o *Options) { o.AdvisorTimeout = 20 * time.Millisecond })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustPlan(t, tieDoc(), o, History{}, tt.adv)
			if r.Advisor.Status != AdvisorIgnored || !r.Advisor.Called {
				t.Errorf("status %+v, want ignored after a call", r.Advisor)
			}
			if !strings.Contains(r.Advisor.Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", r.Advisor.Reason, tt.reason)
			}
			if !reflect.DeepEqual(r.Ops, baseline.Ops) || !reflect.DeepEqual(r.Skipped, baseline.Skipped) || r.TokensAfter != baseline.TokensAfter {
				t.Errorf("a failed advisor changed the plan: ops %v, want %v", opUnits(r), opUnits(baseline))
			}
		})
	}
}

func TestAdvisorIsAskedOnlyWhenItMatters(t *testing.T) {
	answer := []byte(`[{"candidate_id": "t-c", "priority": 1, "rationale_tag": "x"}]`)
	t.Run("once per iteration", func(t *testing.T) {
		adv := &countingAdvisor{answer: answer}
		r := mustPlan(t, tieDoc(), DefaultOptions(), History{Iteration: 4, AdvisorUsedIteration: 4}, adv)
		if adv.calls != 0 || r.Advisor.Status != AdvisorAlreadyUsed {
			t.Errorf("calls %d, report %+v", adv.calls, r.Advisor)
		}
		h := History{Iteration: 4}
		r = mustPlan(t, tieDoc(), DefaultOptions(), h, adv)
		h.Commit(r)
		if h.AdvisorUsedIteration != 4 {
			t.Errorf("Commit did not record the consultation: %+v", h)
		}
		mustPlan(t, tieDoc(), DefaultOptions(), h, adv)
		if adv.calls != 1 {
			t.Errorf("advisor called %d times in one iteration", adv.calls)
		}
	})
	t.Run("no near tie", func(t *testing.T) {
		adv := &countingAdvisor{answer: answer}
		doc := tieDoc()
		setTokens(doc, "t-b", 1500)
		setTokens(doc, "t-c", 600)
		r := mustPlan(t, doc, DefaultOptions(), History{}, adv)
		if adv.calls != 0 || r.Advisor.Status != AdvisorNotNeeded {
			t.Errorf("calls %d, report %+v", adv.calls, r.Advisor)
		}
	})
	t.Run("a wider epsilon takes in the fourth", func(t *testing.T) {
		adv := &countingAdvisor{answer: answer}
		mustPlan(t, tieDoc(), opts(func(o *Options) { o.AdvisorEpsilon = 0.5 }), History{}, adv)
		if len(adv.seen) != 4 {
			t.Errorf("asked about %d candidates, want 4", len(adv.seen))
		}
		adv = &countingAdvisor{answer: answer}
		mustPlan(t, tieDoc(), opts(func(o *Options) { o.AdvisorEpsilon = 0.5; o.AdvisorTopK = 2 }), History{}, adv)
		if len(adv.seen) != 2 {
			t.Errorf("asked about %d candidates, AdvisorTopK 2", len(adv.seen))
		}
	})
	t.Run("off outside tiered_adaptive and with AdvisorTopK below 2", func(t *testing.T) {
		for _, o := range []Options{
			opts(func(o *Options) { o.Mode = ModeTiered }),
			opts(func(o *Options) { o.Mode = ModeLegacy }),
			opts(func(o *Options) { o.AdvisorTopK = 0 }),
		} {
			adv := &countingAdvisor{answer: answer}
			r := mustPlan(t, tieDoc(), o, History{}, adv)
			if adv.calls != 0 || r.Advisor.Status != AdvisorOff {
				t.Errorf("%s/K=%d: calls %d, report %+v", o.Mode, o.AdvisorTopK, adv.calls, r.Advisor)
			}
		}
	})
	t.Run("not under the normal tier", func(t *testing.T) {
		adv := &countingAdvisor{answer: answer}
		doc := tieDoc()
		doc.LimitTokens = 100000
		r := mustPlan(t, doc, DefaultOptions(), History{}, adv)
		if adv.calls != 0 || r.Advisor.Status != AdvisorNotNeeded {
			t.Errorf("calls %d, report %+v", adv.calls, r.Advisor)
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
