package compaction

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/ralphmesh/ralph/pkg/jsontype"
)

// The advisor ranks near-tied candidates, typically a small model asked by
// the Summarizer. The planner never calls it: Plan returns the question
// (Result.NearTies, status pending), the caller asks under AdvisorTimeout,
// and ApplyAdvice (or AdviceFailed) folds the answer in. It is advice only:
// asked at most once per iteration, only about candidates that already
// passed every gate, and anything wrong with its answer leaves the plan as
// it would have been without it.

// Candidate is what the advisor is told about one near-tied op.
type Candidate struct {
	ID          string      `json:"candidate_id"`
	Op          OpKind      `json:"op"`
	Units       []string    `json:"units"`
	Lane        Lane        `json:"lane"`
	Tool        string      `json:"tool,omitempty"`
	Path        string      `json:"path,omitempty"`
	Tokens      int         `json:"tokens"`
	TokensSaved int         `json:"tokens_saved"`
	Harm        float64     `json:"harm"`
	HarmPer1K   float64     `json:"harm_per_1k"`
	Age         int         `json:"age"`
	Reusability Reusability `json:"reusability"`
	Relevance   float64     `json:"relevance"`
}

// AdvisorStatus says what became of the advisor in one plan.
type AdvisorStatus string

// Advisor statuses.
const (
	// AdvisorOff: Options.Advisor unset, a mode other than
	// tiered_adaptive, or AdvisorTopK below 2.
	AdvisorOff AdvisorStatus = "off"
	// AdvisorNotNeeded: no pressure, or no near-tie among the top candidates.
	AdvisorNotNeeded AdvisorStatus = "not_needed"
	// AdvisorAlreadyUsed: it was consulted earlier in this iteration.
	AdvisorAlreadyUsed AdvisorStatus = "already_used"
	// AdvisorPending: there are near ties (Result.NearTies) to ask it
	// about; the plan is the one without advice until ApplyAdvice or
	// AdviceFailed settles it.
	AdvisorPending AdvisorStatus = "pending"
	// AdvisorUsed: its ranking reordered the near-tied candidates.
	AdvisorUsed AdvisorStatus = "used"
	// AdvisorIgnored: it failed, timed out or answered something invalid
	// (Reason says which); the plan is the one without advice.
	AdvisorIgnored AdvisorStatus = "ignored"
)

// AdvisorReport records the advisor's part in a plan.
type AdvisorReport struct {
	Status AdvisorStatus `json:"status"`
	Reason string        `json:"reason,omitempty"`
	// Called: the advisor was asked, whatever came of it (History.Commit
	// then spends this iteration's consultation).
	Called     bool     `json:"called,omitempty"`
	Candidates []string `json:"candidates,omitempty"`
	// Order is the order applied to Candidates when Status is used.
	Order []string `json:"order,omitempty"`
}

// Advice is one entry of an advisor's ranking.
type Advice struct {
	CandidateID  string `json:"candidate_id"`
	Priority     int    `json:"priority"`
	RationaleTag string `json:"rationale_tag"`
}

var rationaleTag = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// ParseAdvice validates an advisor's answer and returns the candidate ids
// in the advised order. The answer is strict JSON, either an array of
// Advice objects or an object {"ranking": [...]} wrapping one (models in
// JSON mode must answer an object), with nothing before or after it:
//
//	[{"candidate_id": "tool-4-0", "priority": 1, "rationale_tag": "stale_trace"}]
//
// Every entry has exactly the three fields; candidate_id is one of
// candidates, at most once; priority is an integer from 1 (apply first);
// rationale_tag is lower_snake_case, at most 48 characters. Equal
// priorities keep the planner's order, and candidates the advice leaves
// out follow the ranked ones in the planner's order.
func ParseAdvice(data []byte, candidates []Candidate) ([]string, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("empty answer")
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return nil, fmt.Errorf("bad JSON: %w", err)
	}
	var entries []json.RawMessage
	switch data[0] {
	case '[':
		if err := strictDecode(data, &entries); err != nil {
			return nil, err
		}
	case '{':
		var wrapper struct {
			Ranking *[]json.RawMessage `json:"ranking"`
		}
		if err := strictDecode(data, &wrapper); err != nil {
			return nil, err
		}
		if wrapper.Ranking == nil {
			return nil, errors.New(`field ranking: required`)
		}
		entries = *wrapper.Ranking
	default:
		return nil, fmt.Errorf("want a JSON array or object, got %s", jsontype.Of(data))
	}
	if len(entries) == 0 {
		return nil, errors.New("empty ranking")
	}
	pos := make(map[string]int, len(candidates))
	for k, c := range candidates {
		pos[c.ID] = k
	}
	type ranked struct {
		id       string
		priority int
		at       int
	}
	var rs []ranked
	seen := map[string]bool{}
	for k, raw := range entries {
		fields, err := decodeObject(raw, []string{"candidate_id", "priority", "rationale_tag"})
		if err != nil {
			return nil, fmt.Errorf("ranking[%d]: %w", k, err)
		}
		for _, f := range []string{"candidate_id", "priority", "rationale_tag"} {
			if _, ok := fields[f]; !ok || isNull(fields[f]) {
				return nil, fmt.Errorf("ranking[%d]: field %s: required", k, f)
			}
		}
		var a Advice
		if err := decodeValue("candidate_id", fields["candidate_id"], &a.CandidateID); err != nil {
			return nil, fmt.Errorf("ranking[%d]: %w", k, err)
		}
		if err := decodeValue("priority", fields["priority"], &a.Priority); err != nil {
			return nil, fmt.Errorf("ranking[%d]: %w", k, err)
		}
		if err := decodeValue("rationale_tag", fields["rationale_tag"], &a.RationaleTag); err != nil {
			return nil, fmt.Errorf("ranking[%d]: %w", k, err)
		}
		at, known := pos[a.CandidateID]
		switch {
		case !known:
			return nil, fmt.Errorf("ranking[%d]: field candidate_id: %q is not a candidate", k, a.CandidateID)
		case seen[a.CandidateID]:
			return nil, fmt.Errorf("ranking[%d]: field candidate_id: %q ranked twice", k, a.CandidateID)
		case a.Priority < 1:
			return nil, fmt.Errorf("ranking[%d]: field priority: must be at least 1, got %d", k, a.Priority)
		case !rationaleTag.MatchString(a.RationaleTag):
			return nil, fmt.Errorf("ranking[%d]: field rationale_tag: want lower_snake_case of at most 48 characters, got %q", k, a.RationaleTag)
		}
		seen[a.CandidateID] = true
		rs = append(rs, ranked{a.CandidateID, a.Priority, at})
	}
	sort.SliceStable(rs, func(a, b int) bool {
		if rs[a].priority != rs[b].priority {
			return rs[a].priority < rs[b].priority
		}
		return rs[a].at < rs[b].at
	})
	order := make([]string, 0, len(candidates))
	for _, r := range rs {
		order = append(order, r.id)
	}
	for _, c := range candidates {
		if !seen[c.ID] {
			order = append(order, c.ID)
		}
	}
	return order, nil
}

// strictDecode decodes one valid JSON value with no unknown fields.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad JSON: %w", err)
	}
	return nil
}

func (p *planner) advisorEnabled() bool {
	return p.adaptive && p.opts.Advisor && p.opts.AdvisorTopK >= 2
}

// advise fills r's advisor report. Without advice it only finds the
// near-tied candidates at the top of cands and, when there are any to ask
// about, puts them in r.NearTies (status pending). With advice (the
// advisor's order of those candidates, already checked by ParseAdvice) it
// reorders them in place. Only the slots the tied candidates already hold
// are refilled, so nothing else moves and nothing is added.
func (p *planner) advise(cands []*candidate, r *Result) {
	rep := &r.Advisor
	if !p.advisorEnabled() {
		rep.Status = AdvisorOff
		return
	}
	tied := p.nearTie(cands)
	if len(tied) < 2 {
		rep.Status = AdvisorNotNeeded
		return
	}
	if p.hist.AdvisorUsedIteration != 0 && p.hist.AdvisorUsedIteration == p.hist.Iteration {
		rep.Status = AdvisorAlreadyUsed
		return
	}
	exported := make([]Candidate, len(tied))
	byID := make(map[string]*candidate, len(tied))
	for k, slot := range tied {
		exported[k] = p.candidate(cands[slot])
		byID[exported[k].ID] = cands[slot]
		rep.Candidates = append(rep.Candidates, exported[k].ID)
	}
	r.NearTies = exported
	if p.advice == nil {
		rep.Status = AdvisorPending
		return
	}
	for k, slot := range tied {
		cands[slot] = byID[p.advice[k]]
	}
	rep.Status = AdvisorUsed
	rep.Called = true
	rep.Order = p.advice
}

// ApplyAdvice settles a pending plan with the advisor's answer, the raw
// text it replied. A valid answer (see ParseAdvice) reorders the near-tied
// candidates, and the plan is made again from that order: ops the new
// order takes first may meet the target sooner. An invalid one leaves the
// plan as it was, with the reason in its report. doc, opts and hist must be
// the ones plan was made from; a plan that is not pending is returned as
// it is.
func ApplyAdvice(doc Document, opts Options, hist History, plan Result, answer []byte) Result {
	if plan.Advisor.Status != AdvisorPending {
		return plan
	}
	order, err := ParseAdvice(answer, plan.NearTies)
	if err != nil {
		return ignoreAdvice(plan, "invalid: "+err.Error())
	}
	advised, err := planWith(doc, opts, hist, order)
	if err != nil || advised.Advisor.Status != AdvisorUsed || !slices.Equal(advised.Advisor.Candidates, plan.Advisor.Candidates) {
		// Not the document, options or history the plan was made from:
		// the advice answers another question.
		return ignoreAdvice(plan, "the plan does not match the document it was made from")
	}
	return advised
}

// AdviceFailed settles a pending plan whose advisor could not answer (err;
// a context deadline is reported as a timeout after timeout): the plan
// stays the one without advice.
func AdviceFailed(plan Result, err error, timeout time.Duration) Result {
	if plan.Advisor.Status != AdvisorPending {
		return plan
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ignoreAdvice(plan, fmt.Sprintf("timeout after %s", timeout))
	}
	return ignoreAdvice(plan, fmt.Sprintf("error: %v", err))
}

// ignoreAdvice records that the advisor was asked and its answer not used.
func ignoreAdvice(plan Result, reason string) Result {
	plan.Advisor.Status = AdvisorIgnored
	plan.Advisor.Reason = reason
	plan.Advisor.Called = true
	return plan
}

// nearTie returns the slots of the top passing open candidates whose score
// is within AdvisorEpsilon (relative) of the best, at most AdvisorTopK of
// them, no two sharing a unit.
func (p *planner) nearTie(cands []*candidate) []int {
	var tied []int
	taken := map[int]bool{}
	best := math.NaN()
	for slot, c := range cands {
		if c.group != groupOpen || len(tied) >= p.opts.AdvisorTopK {
			break
		}
		if len(tied) > 0 && c.stage != cands[tied[0]].stage {
			break // a later stage is not a tie, whatever its score
		}
		if c.gate != "" || anyOfSet(taken, c.members) {
			continue
		}
		if math.IsNaN(best) {
			best = c.score
		} else if c.score > best*(1+p.opts.AdvisorEpsilon) {
			break
		}
		tied = append(tied, slot)
		for _, m := range c.members {
			taken[m] = true
		}
	}
	return tied
}

func anyOfSet(set map[int]bool, idx []int) bool {
	for _, i := range idx {
		if set[i] {
			return true
		}
	}
	return false
}

func (p *planner) candidate(c *candidate) Candidate {
	v := p.v
	i := c.unit()
	out := Candidate{
		ID: v.us[i].ID, Op: c.op, Lane: c.lane, Tool: v.tool[i], Path: v.path[i],
		Tokens: c.tokens, TokensSaved: c.saved, Harm: c.harm, HarmPer1K: round(c.score, 4),
		Age: v.age(i), Reusability: v.reuse[i], Relevance: round(v.relevance[i], 4),
	}
	for _, m := range c.members {
		out.Units = append(out.Units, v.us[m].ID)
	}
	if c.op == OpCheckpointMerge {
		out.ID = string(OpCheckpointMerge) + ":" + v.us[i].ID
		out.Tool, out.Path = "", ""
	}
	return out
}
