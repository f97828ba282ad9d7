package compaction

import (
	"encoding/json"
	"path"
	"strings"
	"unicode"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Lane is what a unit is for, which decides how much harm compacting it
// does and whether it may be touched at all.
type Lane string

// Lanes.
const (
	// LaneInstruction: the system prompt, the task with its acceptance
	// criteria, and the latest user or critic instruction.
	LaneInstruction Lane = "instruction"
	// LaneActiveWrite: the files being written in the task (every write or
	// edit since the last whole-file write of each path) and the latest read
	// of each of those paths.
	LaneActiveWrite Lane = "active_write"
	// LaneSourceEvidence: earlier tool results the active writing cites (it
	// names their path) or draws on (it shares their phrases), and, while
	// drafting or finalizing, the results the task's goal or the latest
	// assistant message names or refers to, before any draft has used them.
	LaneSourceEvidence Lane = "source_evidence"
	// LaneToolTrace: every other tool call and result.
	LaneToolTrace Lane = "tool_trace"
	// LaneHistoricalChat: older narrative: assistant messages, superseded
	// user instructions, checkpoints.
	LaneHistoricalChat Lane = "historical_chat"
)

// phaseWindowTurns is how far back a write makes the task a drafting one.
const phaseWindowTurns = 3

// Evidence detection: a draft draws on a source when it copies phrases
// from it: at least evidenceMinShared word trigrams in common, making up
// evidenceDraftShare of the draft's trigrams or evidenceSourceShare of the
// source's. Shared single words are no evidence: everything read in one
// project shares its vocabulary with everything written in it.
const (
	evidenceMinShared   = 8
	evidenceDraftShare  = 0.10
	evidenceSourceShare = 0.25
)

// Reusability is how cheaply a unit's full content can be had back after it
// is compacted.
type Reusability string

// Reusability levels.
const (
	// ReuseHigh: an artifact holds it, or the file it was read from (or
	// written to) has not changed since.
	ReuseHigh Reusability = "high"
	// ReuseMedium: re-running a read-only tool (search, list_dir) gives it
	// back if the workspace did not change.
	ReuseMedium Reusability = "medium"
	ReuseLow    Reusability = "low"
)

func (r Reusability) weight() float64 {
	switch r {
	case ReuseHigh:
		return 1
	case ReuseMedium:
		return 0.5
	default:
		return 0
	}
}

// view is the planner's analysis of a document: the expanded units with
// their pairs, lanes and runtime metadata. Every slice is indexed like us.
type view struct {
	us      []units.Unit
	current int
	phase   Phase
	lanes   []Lane
	// pair is the index of the other half of a tool call/result pair, or -1.
	pair []int
	// bundleOf is the first unit of what must leave the context together
	// with a unit; bundles lists each bundle by that first unit.
	bundleOf []int
	bundles  map[int][]int
	// tool and path are the pair's, whichever half carries them.
	tool, path []string
	// fixed units (the system prompt and the task) are never touched in
	// any mode.
	fixed []bool
	// latest marks the most recent instruction and active draft: at
	// critical pressure they are the last units touched.
	latest     []bool
	reuse      []Reusability
	relevance  []float64
	checkpoint int // the running checkpoint: the latest summary, or -1
}

// Classify assigns every unit of the planner's view (ExpandCalls of the
// document's units) its lane, keyed by unit id.
func Classify(doc Document) map[string]Lane {
	return newView(doc).laneMap()
}

// DetectPhase is the task's phase: the document's own when it says drafting
// or finalizing; otherwise finalizing when files were written and the goal
// or the latest instruction is about finalizing or review feedback, drafting
// when files were written in the last few turns or the goal is to write
// something that has been started, else exploring. Recent writes override a
// stated "exploring": the document may lag behind what the model does.
func DetectPhase(doc Document) Phase {
	return newView(doc).phase
}

func (v *view) laneMap() map[string]Lane {
	m := make(map[string]Lane, len(v.us))
	for i, u := range v.us {
		m[u.ID] = v.lanes[i]
	}
	return m
}

func (v *view) age(i int) int { return max(0, v.current-v.us[i].Turn) }

func (v *view) isTool(i int) bool {
	k := v.us[i].Kind
	return k == units.KindToolCall || k == units.KindToolResult
}

// callOf is the tool_call half of i's pair, or -1.
func (v *view) callOf(i int) int {
	if v.us[i].Kind == units.KindToolCall {
		return i
	}
	if p := v.pair[i]; p >= 0 && v.us[p].Kind == units.KindToolCall {
		return p
	}
	return -1
}

// resultOf is the tool_result half of i's pair, or -1.
func (v *view) resultOf(i int) int {
	if v.us[i].Kind == units.KindToolResult {
		return i
	}
	if p := v.pair[i]; p >= 0 && v.us[p].Kind == units.KindToolResult {
		return p
	}
	return -1
}

// head is the first unit of i's pair (i itself when unpaired): the position
// of the action in the conversation.
func (v *view) head(i int) int {
	if p := v.pair[i]; p >= 0 && p < i {
		return p
	}
	return i
}

// members is i with its pair partner, in order: what moves together.
func (v *view) members(i int) []int {
	p := v.pair[i]
	switch {
	case p < 0:
		return []int{i}
	case p < i:
		return []int{p, i}
	default:
		return []int{i, p}
	}
}

func newView(doc Document) *view {
	us := ExpandCalls(doc.Units)
	n := len(us)
	v := &view{
		us: us, current: doc.CurrentTurn,
		lanes: make([]Lane, n), pair: make([]int, n), tool: make([]string, n), path: make([]string, n),
		fixed: make([]bool, n), latest: make([]bool, n), reuse: make([]Reusability, n), relevance: make([]float64, n),
		checkpoint: -1,
	}
	if v.current == 0 {
		v.current = latestTurn(us)
	}
	v.pairUp()
	v.bundleUp()
	v.classify(doc.Task)
	v.measure(doc.Task)
	return v
}

// pairUp links each tool_call to the tool_result with its call id.
func (v *view) pairUp() {
	calls, results := map[string]int{}, map[string]int{}
	for i, u := range v.us {
		v.pair[i] = -1
		if u.CallID == "" {
			continue
		}
		switch u.Kind {
		case units.KindToolCall:
			calls[u.CallID] = i
		case units.KindToolResult:
			results[u.CallID] = i
		}
	}
	for id, c := range calls {
		if r, ok := results[id]; ok {
			v.pair[c], v.pair[r] = r, c
		}
	}
	for i, u := range v.us {
		if !v.isTool(i) {
			continue
		}
		v.tool[i] = u.Tool
		args := u.Args
		if c := v.callOf(i); c >= 0 {
			if v.tool[i] == "" {
				v.tool[i] = v.us[c].Tool
			}
			if len(v.us[c].Args) > 0 {
				args = v.us[c].Args
			}
		} else if p := v.pair[i]; p >= 0 && v.tool[i] == "" {
			v.tool[i] = v.us[p].Tool
		}
		v.path[i] = argString(args, "path")
	}
}

// bundleUp links what can only leave the context together: a call and its
// result, and an assistant message with the calls expanded from it (the
// chat API wants the message that made a call before the call's result,
// and a result for every call the message made).
func (v *view) bundleUp() {
	n := len(v.us)
	root := make([]int, n)
	for i := range root {
		root[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if root[i] != i {
			root[i] = find(root[i])
		}
		return root[i]
	}
	union := func(a, b int) {
		ra, rb := find(a), find(b)
		root[max(ra, rb)] = min(ra, rb)
	}
	messages := map[string]int{}
	for i, u := range v.us {
		if u.Kind == units.KindMessage && u.Role == openai.ChatMessageRoleAssistant {
			messages[u.ID] = i
		}
	}
	for i, u := range v.us {
		if p := v.pair[i]; p >= 0 {
			union(i, p)
		}
		if u.Kind == units.KindToolCall {
			if msg, call := SplitCallUnitID(u.ID); call != "" {
				if m, ok := messages[msg]; ok {
					union(i, m)
				}
			}
		}
	}
	v.bundleOf = make([]int, n)
	v.bundles = map[int][]int{}
	for i := range v.us {
		r := find(i)
		v.bundleOf[i] = r
		v.bundles[r] = append(v.bundles[r], i)
	}
}

// bundle is what must leave the context with unit i, in document order.
func (v *view) bundle(i int) []int { return v.bundles[v.bundleOf[i]] }

func isWrite(tool string) bool { return tool == tools.WriteFile || tool == tools.EditFile }

// classify assigns lanes: instructions, then active writes, then their
// evidence; the other tool units are traces and the other messages history.
// Both halves of a tool pair always share a lane.
func (v *view) classify(task Task) {
	latestInstr := v.markInstructions()
	active := v.markActiveWrites()
	v.phase = v.detectPhase(task, latestInstr)
	v.markEvidence(active)
	if v.phase == PhaseDrafting || v.phase == PhaseFinalizing {
		v.markReferenced(task.Goal)
	}
	for i := range v.us {
		switch {
		case v.lanes[i] != "":
		case v.isTool(i):
			v.lanes[i] = LaneToolTrace
		default:
			v.lanes[i] = LaneHistoricalChat
		}
	}
}

// markInstructions marks the system prompt, the task (the first user
// message), the session's memory (IsMemoryUnit) and the latest user
// instruction after the task, which it returns (-1 if none); older user
// messages are history by then. The stable head (StableHead) is fixed and
// instruction: no op ever rewrites it.
func (v *view) markInstructions() (latestInstr int) {
	task0 := -1
	latestInstr = -1
	for i := range StableHead(v.us) {
		v.fixed[i] = true
		v.lanes[i] = LaneInstruction
	}
	for i, u := range v.us {
		switch {
		case u.Kind == units.KindMessage && u.Role == openai.ChatMessageRoleSystem:
			v.fixed[i] = true
			v.lanes[i] = LaneInstruction
		case IsMemoryUnit(u):
			// What earlier tasks learned is never an instruction to be
			// superseded, nor the task: fixed wherever it is.
			v.fixed[i] = true
			v.lanes[i] = LaneInstruction
		case u.Kind == units.KindMessage && u.Role == openai.ChatMessageRoleUser:
			if task0 < 0 {
				task0 = i
				v.fixed[i] = true
				v.lanes[i] = LaneInstruction
			} else {
				latestInstr = i
			}
		case u.Kind == units.KindSummary:
			v.checkpoint = i
		}
	}
	if latestInstr >= 0 {
		v.lanes[latestInstr] = LaneInstruction
		v.latest[latestInstr] = true
	}
	return latestInstr
}

// markActiveWrites marks, per path, every write or edit from the last
// whole-file write on (earlier ones are superseded by it) and the latest
// read of the path, which is what the model edits against. It returns the
// heads of the active writes.
func (v *view) markActiveWrites() (active []int) {
	writesByPath := map[string][]int{}
	var pathsInOrder []string
	for i := range v.us {
		if !v.isTool(i) || v.head(i) != i || !isWrite(v.tool[i]) || v.path[i] == "" {
			continue
		}
		p := v.path[i]
		if _, seen := writesByPath[p]; !seen {
			pathsInOrder = append(pathsInOrder, p)
		}
		writesByPath[p] = append(writesByPath[p], i)
	}
	for _, p := range pathsInOrder {
		ws := writesByPath[p]
		from := 0
		for k, h := range ws {
			if v.tool[h] == tools.WriteFile {
				from = k
			}
		}
		active = append(active, ws[from:]...)
	}
	lastActive := -1
	for _, h := range active {
		v.setPair(h, LaneActiveWrite)
		lastActive = max(lastActive, h)
	}
	if lastActive >= 0 {
		for _, m := range v.members(lastActive) {
			v.latest[m] = true
		}
	}
	for _, p := range pathsInOrder {
		last := -1
		for i := range v.us {
			if v.isTool(i) && v.head(i) == i && v.tool[i] == tools.ReadFile && v.path[i] == p {
				last = i
			}
		}
		if last >= 0 {
			v.setPair(last, LaneActiveWrite)
		}
	}
	return active
}

// markEvidence marks the earlier tool results an active write cites or
// draws on.
func (v *view) markEvidence(active []int) {
	type draft struct {
		at    int
		text  string
		grams map[string]bool
	}
	var drafts []draft
	for _, h := range active {
		if c := v.callOf(h); c >= 0 {
			text := argString(v.us[c].Args, "content") + "\n" + argString(v.us[c].Args, "new")
			drafts = append(drafts, draft{at: h, text: text, grams: trigrams(text)})
		}
	}
	for i := range v.us {
		if !v.isTool(i) || v.head(i) != i || v.lanes[i] != "" || isWrite(v.tool[i]) {
			continue
		}
		r := v.resultOf(i)
		if r < 0 {
			continue
		}
		rg := trigrams(v.us[r].Content)
		for _, d := range drafts {
			if d.at > i && (v.cites(d.text, i) || drawsOn(d.grams, rg)) {
				v.setPair(i, LaneSourceEvidence)
				break
			}
		}
	}
}

// Reference detection: a term of the goal or of the latest assistant
// message is distinctive when at most one in referenceDFShare of the
// context's tool results contains it (a project's common vocabulary, its
// name or the words of every file header, says nothing about which result
// is meant), and a result is referred to when it contains two of the
// text's distinctive terms, or the only one it has.
const referenceDFShare = 5

// markReferenced marks as source evidence, while drafting, the tool
// results the goal or the latest assistant message (the model's current
// intent) names or refers to, even when no draft has used them yet: "next,
// the /users section from internal/http/users.go" makes the read of
// internal/http/users.go evidence before the section is written. A result
// is named when the text holds its path, its file name or a directory of
// its path written as one ("internal/http/"); it is referred to when it
// holds the text's distinctive terms (see referenceDFShare).
func (v *view) markReferenced(goal string) {
	texts := []string{goal}
	for i := len(v.us) - 1; i >= 0; i-- {
		if u := v.us[i]; u.Kind == units.KindMessage && u.Role == openai.ChatMessageRoleAssistant {
			texts = append(texts, u.Content)
			break
		}
	}
	resultWords := map[int]map[string]bool{}
	df := map[string]int{}
	for i, u := range v.us {
		if u.Kind != units.KindToolResult {
			continue
		}
		resultWords[i] = words(u.Content)
		for w := range resultWords[i] {
			df[w]++
		}
	}
	maxDF := max(1, len(resultWords)/referenceDFShare)
	for _, text := range texts {
		if strings.TrimSpace(text) == "" {
			continue
		}
		var terms []string
		for w := range words(prose(text)) {
			if df[w] >= 1 && df[w] <= maxDF {
				terms = append(terms, w)
			}
		}
		need := min(2, len(terms))
		for i := range v.us {
			if !v.isTool(i) || v.head(i) != i || v.lanes[i] != "" || isWrite(v.tool[i]) {
				continue
			}
			r := v.resultOf(i)
			if r < 0 {
				continue
			}
			shared := 0
			for _, w := range terms {
				if resultWords[r][w] {
					shared++
				}
			}
			if v.names(text, i) || (need > 0 && shared >= need) {
				v.setPair(i, LaneSourceEvidence)
			}
		}
	}
}

// prose is text without its paths and file names (any word with a slash,
// or a dot inside it): names decides about those; taken apart into words,
// "internal/http/" would refer to every result that mentions "internal".
func prose(text string) string {
	fields := strings.Fields(text)
	kept := fields[:0]
	for _, f := range fields {
		trimmed := strings.TrimRight(f, ".,;:!?)'\"`")
		if strings.Contains(trimmed, "/") || strings.Contains(strings.TrimLeft(trimmed, ".(`'\""), ".") {
			continue
		}
		kept = append(kept, f)
	}
	return strings.Join(kept, " ")
}

// names reports whether text names the source of pair i: what cites
// accepts, or a directory of its path written as a directory: with a
// trailing slash, or as a path of two or more components, standing on its
// own (not the start of a longer path: "profiles/p01.md" names no other
// file under profiles/).
func (v *view) names(text string, i int) bool {
	if v.cites(text, i) {
		return true
	}
	for dir := path.Dir(v.path[i]); dir != "." && dir != "/" && dir != ""; dir = path.Dir(dir) {
		if namesDir(text, dir) {
			return true
		}
	}
	return false
}

func namesDir(text, dir string) bool {
	for at := 0; ; {
		k := strings.Index(text[at:], dir)
		if k < 0 {
			return false
		}
		start, end := at+k, at+k+len(dir)
		at = start + 1
		if start > 0 && isPathByte(text[start-1]) {
			continue
		}
		rest := text[end:]
		slash := strings.HasPrefix(rest, "/")
		rest = strings.TrimPrefix(rest, "/")
		if rest != "" && isPathByte(rest[0]) && !(rest[0] == '.' && (len(rest) == 1 || !isPathByte(rest[1]))) {
			continue // a longer path or word
		}
		if slash || strings.Contains(dir, "/") {
			return true
		}
	}
}

// isPathByte: a byte that continues a path or a word.
func isPathByte(b byte) bool {
	return b == '/' || b == '.' || b == '_' || b == '-' || b >= 0x80 ||
		'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

func (v *view) setPair(i int, l Lane) {
	for _, m := range v.members(i) {
		v.lanes[m] = l
	}
}

// cites reports whether draft text names the source of pair i: its path,
// its file name when that has an extension, or its artifact id.
func (v *view) cites(text string, i int) bool {
	if p := v.path[i]; len(p) >= 3 && p != "." {
		if strings.Contains(text, p) {
			return true
		}
		if base := path.Base(p); strings.Contains(base, ".") && len(base) >= 4 && strings.Contains(text, base) {
			return true
		}
	}
	if r := v.resultOf(i); r >= 0 && v.us[r].Artifact != "" && strings.Contains(text, v.us[r].Artifact) {
		return true
	}
	return false
}

func drawsOn(draft, source map[string]bool) bool {
	shared := 0
	for g := range source {
		if draft[g] {
			shared++
		}
	}
	return shared >= evidenceMinShared &&
		(float64(shared) >= evidenceDraftShare*float64(len(draft)) || float64(shared) >= evidenceSourceShare*float64(len(source)))
}

// trigrams is the set of runs of three consecutive words of s, lower case.
func trigrams(s string) map[string]bool {
	ws := strings.FieldsFunc(strings.ToLower(s), notWordRune)
	out := map[string]bool{}
	for i := 0; i+3 <= len(ws); i++ {
		out[ws[i]+" "+ws[i+1]+" "+ws[i+2]] = true
	}
	return out
}

var (
	finalizingWords = []string{"finaliz", "finalis", "polish", "proofread", "final version", "final draft"}
	reviewWords     = []string{"reviewer", "review feedback", "did not accept"}
	writingGoal     = map[string]bool{"write": true, "draft": true, "compose": true, "author": true, "rewrite": true, "document": true}
)

func (v *view) detectPhase(task Task, latestInstr int) Phase {
	if task.Phase == PhaseDrafting || task.Phase == PhaseFinalizing {
		return task.Phase
	}
	wrote, wroteRecently := false, false
	for i := range v.us {
		if v.isTool(i) && isWrite(v.tool[i]) {
			wrote = true
			if v.us[i].Turn > v.current-phaseWindowTurns {
				wroteRecently = true
			}
		}
	}
	if !wrote {
		return PhaseExploring
	}
	goal := strings.ToLower(task.Goal)
	instr := ""
	if latestInstr >= 0 {
		instr = strings.ToLower(v.us[latestInstr].Content)
	}
	if containsAny(goal, finalizingWords) || containsAny(instr, finalizingWords) || containsAny(instr, reviewWords) {
		return PhaseFinalizing
	}
	if wroteRecently {
		return PhaseDrafting
	}
	for _, w := range strings.FieldsFunc(goal, notWordRune) {
		if writingGoal[w] {
			return PhaseDrafting
		}
	}
	return PhaseExploring
}

// measure computes the per-unit metadata harm scores use: reusability and
// task relevance (age is derived from turns on demand).
func (v *view) measure(task Task) {
	// A write to a path after a unit's pair makes what it read (or wrote)
	// there stale.
	lastWrite := map[string]int{}
	for i := range v.us {
		if v.isTool(i) && isWrite(v.tool[i]) && v.path[i] != "" {
			lastWrite[v.path[i]] = max(lastWrite[v.path[i]], v.head(i))
		}
	}
	unchangedSince := func(i int) bool {
		w, ok := lastWrite[v.path[i]]
		return v.path[i] != "" && (!ok || w <= v.head(i))
	}
	for i, u := range v.us {
		v.reuse[i] = ReuseLow
		switch {
		case u.Artifact != "":
			v.reuse[i] = ReuseHigh
		case u.Kind == units.KindToolResult && v.tool[i] == tools.ReadFile && unchangedSince(i):
			v.reuse[i] = ReuseHigh
		case u.Kind == units.KindToolCall && v.tool[i] == tools.WriteFile && unchangedSince(i):
			// The file holds exactly what the call wrote.
			v.reuse[i] = ReuseHigh
		case u.Kind == units.KindToolResult && (v.tool[i] == tools.Search || v.tool[i] == tools.ListDir):
			v.reuse[i] = ReuseMedium
		}
	}

	// Relevance: how much of the goal and the recent intent (the task, the
	// latest instruction, the assistant's messages of the last turns) a
	// unit talks about.
	var intent strings.Builder
	intent.WriteString(task.Goal)
	for i, u := range v.us {
		recentAssistant := u.Role == openai.ChatMessageRoleAssistant && u.Kind == units.KindMessage && v.age(i) < phaseWindowTurns
		// The session's memory is about earlier tasks: what it names is not
		// what this one is after.
		task := v.fixed[i] && u.Role == openai.ChatMessageRoleUser && !IsMemoryUnit(u)
		if task || (v.latest[i] && v.lanes[i] == LaneInstruction) || recentAssistant {
			intent.WriteString("\n")
			intent.WriteString(u.Content)
		}
	}
	goalText := intent.String()
	goal := words(goalText)
	saturation := max(4.0, float64(len(goal))/3)
	for i, u := range v.us {
		if v.path[i] != "" && len(v.path[i]) >= 3 && strings.Contains(goalText, v.path[i]) {
			v.relevance[i] = 1
			continue
		}
		uw := words(u.Content + "\n" + string(u.Args))
		shared := 0
		for w := range uw {
			if goal[w] {
				shared++
			}
		}
		v.relevance[i] = min(1, float64(shared)/saturation)
	}
}

// largestStep is the most tokens one turn added to the context among the
// turns in view (an assistant message with its calls and their results,
// a user message): what the next step may add. The head and checkpoints
// are no step.
func (v *view) largestStep() int {
	byTurn := map[int]int{}
	for _, u := range v.us {
		if u.Turn > 0 && u.Kind != units.KindSummary {
			byTurn[u.Turn] += u.Tokens
		}
	}
	largest := 0
	for _, n := range byTurn {
		largest = max(largest, n)
	}
	return largest
}

// argString is a string argument of a tool call, "" when absent.
func argString(args json.RawMessage, key string) string {
	if len(args) == 0 || args[0] != '{' {
		return ""
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(m[key], &s) != nil {
		return ""
	}
	return s
}

// stopWords are frequent words that say nothing about what a text is about.
var stopWords = map[string]bool{
	"that": true, "this": true, "with": true, "from": true, "have": true, "will": true, "into": true,
	"when": true, "then": true, "than": true, "them": true, "they": true, "there": true, "their": true,
	"what": true, "which": true, "were": true, "been": true, "also": true, "some": true, "each": true,
	"more": true, "only": true, "other": true, "over": true, "such": true, "just": true, "like": true,
	"your": true, "about": true, "after": true, "before": true, "should": true, "would": true,
	"could": true, "these": true, "those": true, "does": true, "done": true, "make": true, "made": true,
	"true": true, "false": true, "null": true, "return": true, "func": true, "package": true,
	"import": true, "string": true, "here": true, "need": true, "must": true, "line": true, "lines": true,
	"file": true, "files": true, "let's": true, "look": true, "check": true, "next": true, "still": true,
}

func notWordRune(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' }

// words is the set of distinctive words of s: lower case, four letters or
// more, not a stop word.
func words(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), notWordRune) {
		if len(w) >= 4 && !stopWords[w] {
			out[w] = true
		}
	}
	return out
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
