package compaction

import (
	"math"
	"slices"
	"sort"

	"github.com/ralphmesh/ralph/pkg/units"
)

// Tier is how close the context is to its limit.
type Tier string

// Tiers.
const (
	// TierNormal: below PressureRatio; nothing to do.
	TierNormal Tier = "normal"
	// TierPressure: compact the unprotected lanes.
	TierPressure Tier = "pressure"
	// TierCritical: protected lanes too, as a last resort.
	TierCritical Tier = "critical"
)

// OpKind is what the executor does to a unit.
type OpKind string

// Operations. None of them cuts text: each either keeps a unit, asks the
// compactor for a shorter rewrite of it, or replaces it by a pointer to
// where all of it can be read back.
const (
	// OpKeepRaw is what happens to every unit a plan does not name; it is
	// never listed in Ops.
	OpKeepRaw OpKind = "keep_raw"
	// OpCompactToolArgs rewrites a tool call's arguments (a whole file for
	// write_file) shorter; the call stays in place.
	OpCompactToolArgs OpKind = "compact_tool_args"
	// OpCompactToolOutput rewrites a tool result shorter; its call stays.
	OpCompactToolOutput OpKind = "compact_tool_output"
	// OpCompactHistorical rewrites a message shorter.
	OpCompactHistorical OpKind = "compact_historical"
	// OpReplaceWithPointer replaces a unit's content by a pointer (Op.Pointer:
	// "artifact:<id>" or "file:<path>") and an extractive digest. It needs
	// no LLM call.
	OpReplaceWithPointer OpKind = "replace_with_pointer"
	// OpCheckpointMerge merges Op.Units, stale units not merged before,
	// into the running checkpoint (Op.Checkpoint, "" to start one) and
	// removes them. A tool call and its result are merged together or not
	// at all.
	OpCheckpointMerge OpKind = "checkpoint_merge"
)

// SkipReason says why a unit the planner considered was left raw.
type SkipReason string

// Skip reasons.
const (
	// SkipUnachievableRatio: the op cannot reach a useful saving at the
	// ratio realised so far, or would have to beat the best one realised;
	// or the plan it belongs to cannot reach the target (at the pressure
	// tier, or with calls that would cover too little of the way).
	SkipUnachievableRatio SkipReason = "unachievable_ratio"
	// SkipBudgetExhausted: this iteration's compactor calls are spent.
	SkipBudgetExhausted SkipReason = "budget_exhausted"
	// SkipCooldown: the op's label overshot its targets repeatedly.
	SkipCooldown SkipReason = "cooldown"
	// SkipProtectedLane: the unit is an instruction or active writing (or,
	// while drafting, their source evidence).
	SkipProtectedLane SkipReason = "protected_lane"
	// SkipNoGain: the op would save fewer than MinGainTokens.
	SkipNoGain SkipReason = "no_gain"
)

// Result is a plan. The first seven fields are the stable ones
// (docs/REFERENCE.md, "Plan"); the rest say
// how the plan came about.
type Result struct {
	Tier         Tier            `json:"tier"`
	TokensBefore int             `json:"tokens_before"`
	TargetTokens int             `json:"target_tokens"`
	TokensAfter  int             `json:"tokens_after"`
	Lanes        map[string]Lane `json:"lanes"`
	Ops          []Op            `json:"ops"`
	Skipped      []Skip          `json:"skipped"`

	Mode        Mode  `json:"mode"`
	Phase       Phase `json:"phase"`
	LimitTokens int   `json:"limit_tokens"`
	// TargetMet is false when the unprotected (or, at critical pressure,
	// all touchable) units could not bring the context down to the target.
	TargetMet bool `json:"target_met"`
	// LLMCalls is the number of ops needing a compactor call.
	LLMCalls int           `json:"llm_calls"`
	Advisor  AdvisorReport `json:"advisor"`
	// NearTies are the near-tied candidates the advisor is (or was) asked
	// to rank, when Options.Advisor is set and there are some: the
	// question, for the caller to put to the advisor.
	NearTies []Candidate `json:"near_ties,omitempty"`
}

// Op is one operation of a plan, in the order it is applied.
type Op struct {
	Unit        string `json:"unit"`
	Op          OpKind `json:"op"`
	Lane        Lane   `json:"lane"`
	TokensSaved int    `json:"tokens_saved"`
	// Harm is the expected loss of quality, unitless, higher is worse: the
	// lane's weight times the op's, adjusted for recency, relevance,
	// reusability and earlier compressions; a merge sums its units'.
	Harm float64 `json:"harm"`
	// HarmPer1K is harm per thousand tokens saved, the ordering key.
	HarmPer1K float64 `json:"harm_per_1k"`
	// Units are the units a checkpoint_merge takes in, pairs whole; Unit
	// is the first of them.
	Units      []string `json:"units,omitempty"`
	Checkpoint string   `json:"checkpoint,omitempty"`
	Label      string   `json:"label"`
	// Tokens is the input size; OutputTokens the size the executor asks
	// for (the pointer's size for replace_with_pointer).
	Tokens       int  `json:"tokens"`
	OutputTokens int  `json:"output_tokens"`
	LLMCall      bool `json:"llm_call"`
	// Cached: History holds a result for CacheKey, so no call is needed.
	Cached   bool   `json:"cached,omitempty"`
	CacheKey string `json:"cache_key,omitempty"`
	Pointer  string `json:"pointer,omitempty"`
}

// Skip is a unit left raw and why. Op and Label name the refused op, when
// there was one.
type Skip struct {
	Unit   string     `json:"unit"`
	Reason SkipReason `json:"reason"`
	Op     OpKind     `json:"op,omitempty"`
	Label  string     `json:"label,omitempty"`
}

// Harm weights: what losing detail of a lane costs, and how much of a unit
// an op loses. Tool traces and stale chat are cheap to lose; instructions
// and the draft being written are not. A pointer loses nothing that one
// tool call cannot bring back; a merge loses the unit's identity.
var (
	laneHarm = map[Lane]float64{
		LaneInstruction: 1.0, LaneActiveWrite: 0.9, LaneSourceEvidence: 0.6,
		LaneHistoricalChat: 0.3, LaneToolTrace: 0.2,
	}
	opHarm = map[OpKind]float64{
		OpCompactToolArgs: 0.5, OpCompactToolOutput: 0.7, OpCompactHistorical: 0.8,
		OpCheckpointMerge: 0.9, OpReplaceWithPointer: 0.25,
	}
	// opRank breaks exact ties in the seed design's preference order.
	opRank = map[OpKind]int{
		OpReplaceWithPointer: 0, OpCompactToolArgs: 1, OpCompactToolOutput: 2,
		OpCompactHistorical: 3, OpCheckpointMerge: 4,
	}
)

// OpKinds lists every operation a plan can contain, in the seed design's
// preference order: what an executor must know how to carry out. OpKeepRaw
// is not among them; it is never listed in a plan. The list is the
// planner's own table of ops (every op it plans has a tie-break rank), so
// an op added to the planner is in it.
func OpKinds() []OpKind {
	kinds := make([]OpKind, 0, len(opRank))
	for k := range opRank {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b OpKind) int { return opRank[a] - opRank[b] })
	return kinds
}

// Candidate groups, the order the tiers spend in: group 1 is everything
// unprotected (tool traces and stale chat). At critical pressure the
// protected lanes follow: first pointers on source evidence that can be
// read back (a large source is cheapest to lose whole when one read_file
// brings it back), then every other op on a protected unit, and the most
// recent instruction and active draft come last of all.
const (
	groupOpen = 1 + iota
	groupSourcePointers
	groupProtected
	groupLatest
)

// Plan decides how to bring doc under its limit. It is pure and
// deterministic: the same doc, opts and hist give the same plan. Under the
// normal tier it plans nothing; under pressure and critical tiers it aims
// for opts.TargetRatio of the limit and stops as soon as it gets there. In
// tiered_adaptive mode a plan at the pressure tier that cannot get there
// is not carried out: its ops come back as skips (see feasibility).
// With opts.Advisor set, near-tied candidates are returned in
// Result.NearTies (advisor status pending) for the caller to ask about;
// ApplyAdvice folds the answer in. Errors are only for invalid options or
// documents.
func Plan(doc Document, opts Options, hist History) (Result, error) {
	return planWith(doc, opts, hist, nil)
}

// planWith is Plan with the advisor's order of the near-tied candidates
// applied, when advice is not nil.
func planWith(doc Document, opts Options, hist History, advice []string) (Result, error) {
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	if err := doc.Validate(); err != nil {
		return Result{}, err
	}
	v := newView(doc)
	r := Result{
		Mode: opts.Mode, Phase: v.phase, LimitTokens: doc.LimitTokens,
		Lanes: v.laneMap(), Ops: []Op{}, Skipped: []Skip{},
		TokensBefore: units.Total(v.us),
		Advisor:      AdvisorReport{Status: AdvisorOff},
	}
	p := &planner{v: v, opts: opts, hist: hist, adaptive: opts.Mode == ModeTieredAdaptive, advice: advice}
	if p.advisorEnabled() {
		r.Advisor.Status = AdvisorNotNeeded
	}
	ratio := float64(r.TokensBefore) / float64(doc.LimitTokens)
	switch {
	case ratio >= opts.CriticalRatio:
		r.Tier = TierCritical
	case ratio >= opts.PressureRatio:
		r.Tier = TierPressure
	default:
		r.Tier = TierNormal
		r.TargetTokens, r.TokensAfter, r.TargetMet = r.TokensBefore, r.TokensBefore, true
		return r, nil
	}
	p.tier = r.Tier
	r.TargetTokens = int(math.Floor(opts.TargetRatio * float64(doc.LimitTokens)))
	if opts.Mode == ModeLegacy {
		p.legacy(&r)
	} else {
		p.tiered(&r)
		if p.adaptive {
			p.feasibility(&r, doc.LimitTokens)
		}
	}
	r.TokensAfter = r.TokensBefore
	for _, op := range r.Ops {
		r.TokensAfter -= op.TokensSaved
		if op.LLMCall {
			r.LLMCalls++
		}
	}
	r.TargetMet = r.TokensAfter <= r.TargetTokens
	return r, nil
}

// feasibility is the plan-level gate of adaptive mode, for a plan that
// cannot reach its target.
//
// At the pressure tier such a plan is not carried out at all: compaction
// is a hysteresis, from the pressure threshold down to a target well below
// it, done once and deep rather than a few hundred tokens at every step.
// Every rewrite breaks the provider's prompt cache from the first changed
// unit on, so a plan that stops short of the target would pay that price
// and be followed by another compaction a step or two later. The context
// keeps its cache until the critical tier, where protected lanes may give
// way and the target can be reached. One exception: when one more step as
// large as the largest in view would take the context past the limit, and
// the plan is what keeps it within and covers at least MinTargetShare of
// the way to the target, the plan is carried out, short of the target as
// it is: the builder asks again after that step, and should not find the
// context over its window. A plan that would not keep it within changes
// nothing about that risk, and one that covers only a sliver of the way is
// no relief: they wait all the same.
//
// At the critical tier the plan's compactor calls are dropped when they
// would cover less than MinTargetShare of the way there, keeping the free
// ops (pointers, cached results), but only if the free ops alone bring the
// context under the pressure threshold, so that the next step is not at
// risk of overflowing, and only if the plan touches no protected unit: a
// merge of old traces and chat is never given up for free pointers on the
// protected lanes.
func (p *planner) feasibility(r *Result, limit int) {
	saved, callSaved := 0, 0
	trespass := false
	for _, op := range r.Ops {
		saved += op.TokensSaved
		if op.LLMCall && !op.Cached {
			callSaved += op.TokensSaved
		}
		trespass = trespass || p.protectedLane(op.Lane)
	}
	if r.TokensBefore-saved <= r.TargetTokens || len(r.Ops) == 0 {
		return
	}
	need := r.TokensBefore - r.TargetTokens
	step := p.v.largestStep()
	relief := r.TokensBefore+step > limit && r.TokensBefore-saved+step <= limit && float64(saved) >= p.opts.MinTargetShare*float64(need)
	if r.Tier == TierPressure && !relief {
		for _, op := range r.Ops {
			us := op.Units // a merge's, its first unit included
			if len(us) == 0 {
				us = []string{op.Unit}
			}
			for _, u := range us {
				r.Skipped = append(r.Skipped, Skip{Unit: u, Reason: SkipUnachievableRatio, Op: op.Op, Label: op.Label})
			}
		}
		r.Ops = r.Ops[:0]
		p.sortSkips(r)
		// Nothing is carried out, so there is nothing to ask the advisor.
		if r.Advisor.Status == AdvisorPending {
			r.Advisor = AdvisorReport{Status: AdvisorNotNeeded}
			r.NearTies = nil
		}
		return
	}
	if r.Tier == TierPressure {
		return // the plan keeps the next step within the limit
	}
	if trespass || callSaved == 0 || float64(callSaved) >= p.opts.MinTargetShare*float64(need) {
		return
	}
	if float64(r.TokensBefore-(saved-callSaved)) >= p.opts.PressureRatio*float64(limit) {
		return
	}
	kept := r.Ops[:0]
	for _, op := range r.Ops {
		if op.LLMCall && !op.Cached {
			r.Skipped = append(r.Skipped, Skip{Unit: op.Unit, Reason: SkipUnachievableRatio, Op: op.Op, Label: op.Label})
			continue
		}
		kept = append(kept, op)
	}
	r.Ops = kept
	p.sortSkips(r)
}

// sortSkips puts r.Skipped back in document order after ops were turned
// into skips.
func (p *planner) sortSkips(r *Result) {
	at := make(map[string]int, len(p.v.us))
	for i, u := range p.v.us {
		at[u.ID] = i
	}
	sort.SliceStable(r.Skipped, func(a, b int) bool { return at[r.Skipped[a].Unit] < at[r.Skipped[b].Unit] })
}

type planner struct {
	v        *view
	opts     Options
	hist     History
	adaptive bool
	tier     Tier
	// advice is the advisor's order of the near-tied candidates, nil
	// without one.
	advice []string
}

// candidate is one op the planner could apply.
type candidate struct {
	op      OpKind
	members []int // the units it takes, in order; one unless merging
	lane    Lane
	group   int
	tokens  int
	output  int
	saved   int
	harm    float64 // rounded to 4 decimals, as reported
	score   float64 // harm per 1000 tokens saved, rounded to 6 decimals
	label   string
	llm     bool
	cached  bool
	key     string
	pointer string
	gate    SkipReason // the static gate it fails, "" if none
	// stage orders candidates within a group before their score: in
	// adaptive mode a rewrite of a single unit waits for the checkpoint
	// merge (see before).
	stage int
}

func (c *candidate) unit() int { return c.members[0] }

func (p *planner) recent(i int) bool {
	return p.v.us[i].Turn > p.v.current-p.opts.RecentTurns
}

func (p *planner) protectedLane(l Lane) bool {
	switch l {
	case LaneInstruction, LaneActiveWrite:
		return true
	case LaneSourceEvidence:
		return p.v.phase == PhaseDrafting || p.v.phase == PhaseFinalizing
	}
	return false
}

// tiered plans by harm per token saved under the tier's lane rules.
func (p *planner) tiered(r *Result) {
	cands, protected := p.candidates()
	static := p.staticGates(cands)
	p.advise(cands, r)
	used, dynamic := p.schedule(cands, r)
	for i, u := range p.v.us {
		var s Skip
		switch {
		case used[i]:
			continue
		case protected[i]:
			s = Skip{Unit: u.ID, Reason: SkipProtectedLane}
		case !static.passes[i] && static.reason[i] != "":
			s = Skip{Unit: u.ID, Reason: static.reason[i], Op: static.by[i].op, Label: static.by[i].label}
		case dynamic.reason[i] != "":
			s = Skip{Unit: u.ID, Reason: dynamic.reason[i], Op: dynamic.by[i].op, Label: dynamic.by[i].label}
		default:
			continue
		}
		r.Skipped = append(r.Skipped, s)
	}
}

// candidates lists every op the tier allows, best first, and marks the
// units left raw because of their lane.
func (p *planner) candidates() (cands []*candidate, protected []bool) {
	v := p.v
	protected = make([]bool, len(v.us))
	for i, u := range v.us {
		group := groupOpen
		switch {
		case v.fixed[i]:
			protected[i] = true
			continue
		case u.Kind == units.KindSummary:
			continue // the checkpoint grows by merges; it is never re-merged
		case p.protectedLane(v.lanes[i]):
			protected[i] = true
			if p.tier != TierCritical || p.recent(i) {
				continue
			}
			group = groupProtected
			if v.latest[i] {
				group = groupLatest
			}
		case p.recent(i):
			continue
		}
		cands = append(cands, p.unitCandidates(i, group)...)
	}
	if m := p.merge(make([]bool, len(v.us))); m != nil {
		cands = append(cands, m)
	}
	sort.SliceStable(cands, func(a, b int) bool { return p.before(cands[a], cands[b]) })
	return cands, protected
}

// gates records, per unit, the first gate that refused one of its
// candidates. A unit's own ops explain it better than a merge it might
// have been part of, so a merge's gate only stands for units without ops
// of their own.
type gates struct {
	reason []SkipReason
	by     []*candidate
	own    []bool
	// passes: some candidate of the unit passed the static gates.
	passes []bool
}

func newGates(n int, cands []*candidate) *gates {
	g := &gates{reason: make([]SkipReason, n), by: make([]*candidate, n), own: make([]bool, n), passes: make([]bool, n)}
	for _, c := range cands {
		if c.op != OpCheckpointMerge {
			g.own[c.unit()] = true
		}
	}
	return g
}

func (g *gates) speaksFor(c *candidate, m int) bool {
	return c.op != OpCheckpointMerge || !g.own[m]
}

func (g *gates) refuse(c *candidate, reason SkipReason) {
	for _, m := range c.members {
		if g.reason[m] == "" && g.speaksFor(c, m) {
			g.reason[m], g.by[m] = reason, c
		}
	}
}

// staticGates: a unit that gets no op and whose every candidate fails a
// static gate is reported with the gate of its best candidate, whether or
// not planning gets that far.
func (p *planner) staticGates(cands []*candidate) *gates {
	g := newGates(len(p.v.us), cands)
	for _, c := range cands {
		if c.gate != "" {
			g.refuse(c, c.gate)
			continue
		}
		for _, m := range c.members {
			if g.speaksFor(c, m) {
				g.passes[m] = true
			}
		}
	}
	return g
}

// schedule takes candidates in order until the target is met, skipping
// those whose units are taken and those a gate refuses: the static gates,
// and the call budget, which depends on what was taken before. It returns
// the units taken and the gates met on the way.
func (p *planner) schedule(cands []*candidate, r *Result) (used []bool, dynamic *gates) {
	used = make([]bool, len(p.v.us))
	dynamic = newGates(len(p.v.us), cands)
	remaining := r.TokensBefore
	calls := 0
	if p.adaptive {
		calls = p.hist.CallsThisIteration
	}
	for k := 0; k < len(cands) && remaining > r.TargetTokens; k++ {
		c := cands[k]
		if c.op == OpCheckpointMerge {
			// Earlier ops may have taken some of its units: merge what is
			// left, in its place by its new score.
			m := p.merge(used)
			if m == nil {
				continue
			}
			if !slices.Equal(m.members, c.members) {
				at := k + 1
				for at < len(cands) && !p.before(m, cands[at]) {
					at++
				}
				cands = slices.Insert(cands, at, m)
				continue
			}
		}
		if anyOf(used, c.members) {
			continue
		}
		gate := c.gate
		if gate == "" && p.adaptive && c.llm && !c.cached && calls >= p.opts.MaxCallsPerIteration {
			gate = SkipBudgetExhausted
		}
		if gate != "" {
			dynamic.refuse(c, gate)
			continue
		}
		r.Ops = append(r.Ops, p.op(c))
		for _, m := range c.members {
			used[m] = true
		}
		remaining -= c.saved
		if c.llm && !c.cached {
			calls++
		}
	}
	return used, dynamic
}

// before orders candidates: group, then stage, then harm per token saved,
// then the larger saving, then document order, then the seed design's op
// order. In adaptive mode single-unit rewrites are a later stage than
// pointers and the checkpoint merge: the merge rewrites the oldest run of
// stale units as one block with one call, where rewriting them one by one
// would spend a call each (a short budget would be gone before the run
// is) and leave stale units scattered between the rewrites, for the next
// compaction to come back to and break the prompt cache there again.
func (p *planner) before(a, b *candidate) bool {
	if a.group != b.group {
		return a.group < b.group
	}
	if a.stage != b.stage {
		return a.stage < b.stage
	}
	if a.score != b.score {
		return a.score < b.score
	}
	if a.saved != b.saved {
		return a.saved > b.saved
	}
	if a.unit() != b.unit() {
		return a.unit() < b.unit()
	}
	return opRank[a.op] < opRank[b.op]
}

// unitCandidates are the ops that apply to unit i.
func (p *planner) unitCandidates(i, group int) []*candidate {
	v := p.v
	u := v.us[i]
	var out []*candidate
	pointer := ""
	if v.reuse[i] == ReuseHigh {
		if u.Artifact != "" {
			pointer = "artifact:" + u.Artifact
		} else if v.path[i] != "" {
			pointer = "file:" + v.path[i]
		}
	}

	switch u.Kind {
	case units.KindToolCall:
		if len(u.Args) > 0 && !isNull(u.Args) {
			out = append(out, p.single(i, OpCompactToolArgs, group, ""))
			if pointer != "" {
				out = append(out, p.single(i, OpReplaceWithPointer, group, pointer))
			}
		}
	case units.KindToolResult:
		if u.Content != "" {
			out = append(out, p.single(i, OpCompactToolOutput, group, ""))
			if pointer != "" {
				out = append(out, p.single(i, OpReplaceWithPointer, group, pointer))
			}
		}
	case units.KindMessage:
		if u.Content != "" {
			out = append(out, p.single(i, OpCompactHistorical, group, ""))
		}
	}
	return out
}

func (p *planner) single(i int, op OpKind, group int, pointer string) *candidate {
	v := p.v
	c := &candidate{
		op: op, members: []int{i}, lane: v.lanes[i], group: group,
		tokens: v.us[i].Tokens, label: Label(op, v.tool[i], v.lanes[i]),
		llm: op != OpReplaceWithPointer, pointer: pointer,
	}
	if op == OpReplaceWithPointer && group == groupProtected && v.lanes[i] == LaneSourceEvidence {
		c.group = groupSourcePointers
	}
	if p.adaptive && c.llm {
		c.stage = 1
	}
	p.finish(c, p.unitHarm(i, op))
	return c
}

// merge is the checkpoint merge of the oldest stale units no op has taken:
// tool traces and chat outside the recent window, in document order, as
// many as one compactor call's output can hold. Units go in by bundle (a
// message, its calls and their results) or not at all.
func (p *planner) merge(used []bool) *candidate {
	v := p.v
	eligible := func(i int) bool {
		u := v.us[i]
		l := v.lanes[i]
		return !used[i] && !v.fixed[i] && u.Kind != units.KindSummary && !p.recent(i) &&
			(l == LaneToolTrace || l == LaneHistoricalChat)
	}
	ratio := p.expected(Label(OpCheckpointMerge, "", LaneHistoricalChat), OpCheckpointMerge)
	var members []int
	total := 0
	for i := range v.us {
		group := v.bundle(i)
		if group[0] != i || !allOf(eligible, group) {
			continue
		}
		t := 0
		for _, m := range group {
			t += v.us[m].Tokens
		}
		if len(members) > 0 && ceilTokens(float64(total+t)*ratio) > p.opts.MaxOutputTokens {
			break
		}
		members = append(members, group...)
		total += t
	}
	if len(members) == 0 {
		return nil
	}
	c := &candidate{
		op: OpCheckpointMerge, members: members, lane: LaneHistoricalChat, group: groupOpen,
		tokens: total, label: Label(OpCheckpointMerge, "", LaneHistoricalChat), llm: true,
	}
	p.finish(c, p.mergeHarm(members))
	return c
}

// expected is the output/input ratio an LLM op is planned at: the mean
// realised for its label in adaptive mode, the default otherwise.
func (p *planner) expected(label string, op OpKind) float64 {
	if p.adaptive {
		if mean, _, ok := p.hist.realised(label, op); ok {
			return mean
		}
	}
	return DefaultRatio(op)
}

// finish sizes c, scores it, keys its cache entry and applies the static
// gates.
func (p *planner) finish(c *candidate, harm float64) {
	e := 0.0
	if c.op == OpReplaceWithPointer {
		c.output = min(c.tokens, p.opts.PointerTokens)
	} else {
		e = p.expected(c.label, c.op)
		c.output = min(ceilTokens(float64(c.tokens)*e), p.opts.MaxOutputTokens)
		if c.op == OpCheckpointMerge {
			// A checkpoint carries its frame (header, the four section
			// headings, the facts it must name) whatever it merges, so a
			// small merge can grow the context.
			c.output += p.opts.CheckpointOverhead
		}
	}
	c.saved = c.tokens - c.output
	c.harm = round(harm, 4)
	c.score = math.Inf(1)
	if c.saved > 0 {
		c.score = round(c.harm*1000/float64(c.saved), 6)
	}
	if c.llm {
		c.key = CacheKey(p.payload(c), c.output, c.label, p.opts.Model, p.opts.PromptVersion)
		c.cached = p.hist.Cached[c.key]
	}
	c.gate = p.gate(c, e)
}

func (p *planner) gate(c *candidate, e float64) SkipReason {
	if !p.adaptive {
		if c.saved <= 0 {
			return SkipNoGain
		}
		return ""
	}
	if p.hist.coolingDown(c.label, p.opts) {
		return SkipCooldown
	}
	if c.llm && c.op != OpCheckpointMerge && p.hist.Compressed[p.v.us[c.unit()].ID] > 0 {
		// Rewriting a rewrite (or a pointer's digest) gains little and
		// loses what the first rewrite kept; the unit's next step is the
		// checkpoint.
		return SkipNoGain
	}
	if c.llm && c.tokens > 0 {
		floor := p.opts.MinFeasibleRatio
		_, best, realised := p.hist.realised(c.label, c.op)
		if realised {
			floor = best
		}
		if e > p.opts.MaxUsefulRatio || float64(c.output)/float64(c.tokens) < floor {
			return SkipUnachievableRatio
		}
		if c.saved < p.opts.MinGainTokens && realised {
			// History, not the unit's size, is what rules it out when the
			// default ratio would have been worth the call.
			atDefault := c.tokens - min(ceilTokens(float64(c.tokens)*DefaultRatio(c.op)), p.opts.MaxOutputTokens)
			if atDefault >= p.opts.MinGainTokens {
				return SkipUnachievableRatio
			}
		}
	}
	floor := p.opts.MinGainTokens
	if !c.llm {
		// Without a call the saving costs nothing but the unit's detail,
		// which harm already weighs: a lower floor.
		floor /= 4
	}
	if c.saved < max(1, floor) {
		return SkipNoGain
	}
	return ""
}

// unitHarm is the expected harm of applying op to unit i: the lane's
// weight times the op's, more for recent and relevant units and for units
// compressed before (each rewrite loses more), less for content that can be
// had back.
func (p *planner) unitHarm(i int, op OpKind) float64 {
	v := p.v
	age := float64(v.age(i))
	recency := 0.4 + 2.4/(4+age) // 1 when used this turn, 0.7 four turns ago, toward 0.4
	relevance := 1 + float64(0.5*v.relevance[i])
	rewritten := 1 + float64(0.25*float64(p.hist.Compressed[v.us[i].ID]))
	recoverable := 1.0
	if op != OpReplaceWithPointer && op != OpCheckpointMerge {
		recoverable = 1 - float64(0.3*v.reuse[i].weight())
	}
	// Explicit conversions keep each product rounded on its own, so that
	// no platform fuses them and the golden plans match everywhere.
	h := float64(laneHarm[v.lanes[i]] * opHarm[op])
	h = float64(h * recency)
	h = float64(h * relevance)
	h = float64(h * rewritten)
	return float64(h * recoverable)
}

// mergeHarm is the harm of merging members: each unit loses itself, so a
// merge costs the sum of its members' harms, which keeps its harm per token
// saved comparable with single-unit ops.
func (p *planner) mergeHarm(members []int) float64 {
	h := 0.0
	for _, m := range members {
		h = float64(h + p.unitHarm(m, OpCheckpointMerge))
	}
	return h
}

func (p *planner) op(c *candidate) Op {
	v := p.v
	o := Op{
		Unit: v.us[c.unit()].ID, Op: c.op, Lane: c.lane, TokensSaved: c.saved,
		Harm: c.harm, HarmPer1K: round(c.score, 4), Label: c.label,
		Tokens: c.tokens, OutputTokens: c.output, LLMCall: c.llm && !c.cached,
		Cached: c.cached, CacheKey: c.key, Pointer: c.pointer,
	}
	if c.op == OpCheckpointMerge {
		o.Units = make([]string, len(c.members))
		for k, m := range c.members {
			o.Units[k] = v.us[m].ID
		}
		if v.checkpoint >= 0 && p.opts.Mode != ModeLegacy {
			o.Checkpoint = v.us[v.checkpoint].ID
		}
	}
	return o
}

// legacy is the single summary of everything the orchestrator design
// started from: all but the system prompt, the task and the most recent
// turn go into one new summary, earlier summaries included. Bundles stay
// whole here too.
func (p *planner) legacy(r *Result) {
	v := p.v
	last := latestTurn(v.us)
	var members []int
	total := 0
	for i := range v.us {
		group := v.bundle(i)
		if group[0] != i {
			continue
		}
		take := true
		for _, m := range group {
			if v.fixed[m] || v.us[m].Turn >= last {
				take = false
			}
		}
		if !take {
			continue
		}
		for _, m := range group {
			total += v.us[m].Tokens
		}
		members = append(members, group...)
	}
	if len(members) == 0 {
		return
	}
	c := &candidate{
		op: OpCheckpointMerge, members: members, lane: LaneHistoricalChat, group: groupOpen,
		tokens: total, label: Label(OpCheckpointMerge, "", LaneHistoricalChat), llm: true,
		output: ceilTokens(float64(total) * DefaultRatio(OpCheckpointMerge)),
	}
	c.saved = c.tokens - c.output
	if c.saved <= 0 {
		return
	}
	c.harm = round(p.mergeHarm(members), 4)
	c.score = round(c.harm*1000/float64(c.saved), 6)
	c.key = CacheKey(p.payload(c), c.output, c.label, p.opts.Model, p.opts.PromptVersion)
	c.cached = p.hist.Cached[c.key]
	r.Ops = append(r.Ops, p.op(c))
}

// payload is the text the compactor gets for c (see OpPayload).
func (p *planner) payload(c *candidate) string {
	v := p.v
	ms := make([]units.Unit, len(c.members))
	for k, m := range c.members {
		ms[k] = v.us[m]
	}
	var checkpoint *units.Unit
	if c.op == OpCheckpointMerge && v.checkpoint >= 0 && p.opts.Mode != ModeLegacy {
		checkpoint = &v.us[v.checkpoint]
	}
	return payload(c.op, ms, checkpoint)
}

func anyOf(set []bool, idx []int) bool {
	for _, i := range idx {
		if set[i] {
			return true
		}
	}
	return false
}

func allOf(ok func(int) bool, idx []int) bool {
	for _, i := range idx {
		if !ok(i) {
			return false
		}
	}
	return true
}

func ceilTokens(x float64) int { return int(math.Ceil(x - 1e-9)) }

func round(x float64, decimals int) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	scale := math.Pow(10, float64(decimals))
	return math.Round(x*scale) / scale
}
