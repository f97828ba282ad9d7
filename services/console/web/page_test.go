package web_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
)

// finishedScript is a session that shows everything the page draws. In R1
// the builder reads six long sources, one a turn, in a window that holds
// about three, so its context is compacted again and again; the critic
// rejects its first claim. In D1 it reads notes.txt over and over: the
// stuck detector names the loop, the builder nudges, prunes, then splits
// the task, and the two subtasks finish it.
func finishedScript() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&b, "  - {model: builder, when: {first_user_contains: \"Task R1:\"}, times: 1, reply: {content: \"Reading source %d and noting it.\", tool_calls: "+
			"[{name: read_file, arguments: {path: src%02d.txt}}, {name: write_file, arguments: {path: note%02d.md, content: \"source %d reviewed\\n\"}}]}}\n", i, i, i, i)
	}
	b.WriteString(`  - {model: builder, when: {first_user_contains: "Task R1:", last_contains: "report.md is missing"}, reply: {content: "Writing report.md.", tool_calls: [{name: write_file, arguments: {path: report.md, content: "# Report\nsix sources reviewed\n"}}]}}
  - {model: builder, when: {first_user_contains: "Task R1:"}, reply: {content: "The six sources are noted."}}
  - {model: builder, when: {first_user_contains: "Task D1.1:", last_role: user}, reply: {content: "Writing the title.", tool_calls: [{name: write_file, arguments: {path: notes-report.md, content: "# Notes report\n"}}]}}
  - {model: builder, when: {first_user_contains: "Task D1.1:"}, reply: {content: "notes-report.md has its title."}}
  - {model: builder, when: {first_user_contains: "Task D1.2:", last_role: user}, reply: {content: "Appending the notes.", tool_calls: [{name: edit_file, arguments: {path: notes-report.md, old: "# Notes report\n", new: "# Notes report\n- remember the milk\n"}}]}}
  - {model: builder, when: {first_user_contains: "Task D1.2:"}, reply: {content: "notes-report.md lists the notes."}}
  - {model: builder, when: {first_user_contains: "Task D1:"}, reply: {content: "Let me read the notes again.", tool_calls: [{name: read_file, arguments: {path: notes.txt}}]}}
  - {model: summarizer, reply: {content: "Read a source file: quarterly figures by region, reviewed and filed."}}
  - {model: pruner, reply: {content: "notes.txt says: remember the milk."}}
  - model: decomposer
    reply:
      content: |
        {"subtasks": [
          {"id": "title", "title": "Give notes-report.md a title", "description": "Create notes-report.md with a level-1 title.", "acceptance_criteria": ["notes-report.md starts with a # title"]},
          {"id": "list", "title": "List the notes", "description": "Add every line of notes.txt as a bullet.", "acceptance_criteria": ["notes-report.md lists every note"], "depends_on": ["title"]}
        ]}
  - {model: critic, times: 1, reply: {content: '{"approved": false, "feedback": "report.md is missing: write it, one line for the six sources.", "unmet_criteria": ["report.md covers src01.txt to src06.txt"]}'}}
  - {model: critic, reply: {content: '{"approved": true, "feedback": "All criteria are met."}'}}
`)
	return b.String()
}

const finishedPRD = `
tasks:
  - {id: R1, title: Report on the six sources, acceptance_criteria: [report.md covers src01.txt to src06.txt]}
  - {id: D1, title: Write the notes report, depends_on: [R1], acceptance_criteria: [notes-report.md has a title, notes-report.md lists every note]}
`

// chartPoint, chartDrop and chartSignal are what the chart's elements say
// in their data attributes.
type chartPoint struct {
	Iteration int `json:"iteration"`
	Tokens    int `json:"tokens"`
}

type chartDrop struct {
	Kind      string `json:"kind"`
	Iteration int    `json:"iteration"`
	Before    int    `json:"before"`
	After     int    `json:"after"`
}

type chartSignal struct {
	Iteration int    `json:"iteration"`
	Pattern   string `json:"pattern"`
	Action    string `json:"action"`
	Response  string `json:"response"`
}

// responses names what the builder did about a stuck signal by the event
// it published next.
var responses = map[events.Type]string{
	events.IterationRequested: "nudge",
	events.PruneRequested:     "prune",
	events.DecomposeRequested: "decompose",
	events.SessionEscalated:   "escalate",
}

// expected is what the chart must show, read from the session's events.
func expected(t *testing.T, got []events.Envelope) (points []chartPoint, drops []chartDrop, signals []chartSignal) {
	// The iteration a drop follows is the one its request names: a
	// compaction's iteration, a prune's signal.
	pending := 0
	for i, env := range got {
		switch env.Type {
		case events.IterationCompleted:
			r := decode[events.IterationRecord](t, env)
			points = append(points, chartPoint{r.Iteration, r.ContextTokens})
		case events.CompactionRequested:
			pending = decode[events.CompactionRequestedData](t, env).Iteration
		case events.PruneRequested:
			pending = decode[events.PruneRequestedData](t, env).Signal.Iteration
		case events.CompactionCompleted:
			d := decode[events.CompactionCompletedData](t, env)
			drops = append(drops, chartDrop{"compaction", pending, d.TokensBefore, d.TokensAfter})
		case events.PruneCompleted:
			d := decode[events.PruneCompletedData](t, env)
			drops = append(drops, chartDrop{"prune", pending, d.TokensBefore, d.TokensAfter})
		case events.IterationAnalyzed:
			d := decode[events.IterationAnalyzedData](t, env)
			if d.Signal == nil {
				continue
			}
			s := chartSignal{Iteration: d.Signal.Iteration, Pattern: d.Signal.Pattern, Action: string(d.Signal.Action)}
			if i+1 < len(got) {
				s.Response = responses[got[i+1].Type]
			}
			signals = append(signals, s)
		}
	}
	return points, drops, signals
}

// TestFinishedSessionPage opens a finished session that was compacted,
// got stuck, was pruned and split, and checks that the page shows what
// its events say: one chart point per iteration with its context tokens,
// every compaction and the prune as a drop after the right iteration, the
// stuck signals with what the builder did, the threshold and window, the
// task tree with the subtasks, the critic's rejection, and tokens and cost
// by role. The way in is the session list, with the token typed in.
func TestFinishedSessionPage(t *testing.T) {
	ctx, setOrigin := browser(t)
	s := newSession(t, finishedScript(), func(c *config.Config) { c.Builder.ContextWindow = 6000 })
	s.run()
	files := map[string]string{"notes.txt": "remember the milk\n"}
	for i := 1; i <= 6; i++ {
		name := fmt.Sprintf("src%02d.txt", i)
		files[name] = longSource(name, 60)
	}
	const id = "web-finished"
	s.start(id, finishedPRD, files)
	got := s.wait(id)
	points, drops, signals := expected(t, got)

	// The session is the one the test means: it was compacted, stuck,
	// pruned and split.
	changed := 0
	for _, d := range drops {
		if d.Kind == "compaction" && d.After < d.Before {
			changed++
		}
	}
	kinds := map[events.Type]int{}
	for _, env := range got {
		kinds[env.Type]++
	}
	if changed < 2 || len(signals) == 0 || kinds[events.PruneCompleted] != 1 || kinds[events.TaskDecomposed] != 1 {
		t.Fatalf("the session was not the one the test needs: %d compactions that changed the context, %d stuck signals, %d prunes, %d decompositions",
			changed, len(signals), kinds[events.PruneCompleted], kinds[events.TaskDecomposed])
	}

	base, token := consoleServer(t, s.m)
	setOrigin(base)

	// The list, first without a token, then with a wrong one, then the
	// team's.
	do(t, ctx, chromedp.Navigate(base+"/"))
	waitFor(t, ctx, "the request for a token", `!document.getElementById("notice").hidden && document.getElementById("notice").textContent.includes("Enter your team's API token")`)
	do(t, ctx, chromedp.SendKeys(chromedp.CSS("#token"), "not-a-token"), chromedp.Click(chromedp.CSS("#token-save")))
	waitFor(t, ctx, "the refusal", `document.getElementById("notice").textContent.includes("refused this token") && document.getElementById("status").dataset.status === "refused"`)
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById("token").value = ""`), chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#token-save")))
	waitFor(t, ctx, "the session in the list", `document.querySelector('tr[data-session="web-finished"][data-state="completed"]') !== null`)
	row := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('tr[data-session="web-finished"] td')).map(td => td.textContent)`)
	if len(row) != 8 || row[0] != "completed" || row[1] != id || row[2] != events.DefaultTeam || row[4] != fmt.Sprint(len(points)) {
		t.Fatalf("list row %q: want completed, %s, the default team, %d iterations", row, id, len(points))
	}
	screenshot(t, ctx, "list.png")

	// Into the session: the page replays every event.
	do(t, ctx, chromedp.Click(chromedp.CSS(`tr[data-session="web-finished"] a`)))
	waitFor(t, ctx, "every event replayed", fmt.Sprintf(`document.body.dataset.events === "%d" && document.body.dataset.state === "completed" && document.querySelector('#usage tr[data-role="critic"]') !== null`, len(got)))

	gotPoints := eval[[]chartPoint](t, ctx, `Array.from(document.querySelectorAll('#chart [data-kind="point"]')).map(e => ({iteration: +e.dataset.iteration, tokens: +e.dataset.tokens}))`)
	if !slices.Equal(gotPoints, points) {
		t.Errorf("chart points (iteration, context tokens)\n got %v\nwant %v", gotPoints, points)
	}
	gotDrops := eval[[]chartDrop](t, ctx, `Array.from(document.querySelectorAll('#chart [data-kind="compaction"], #chart [data-kind="prune"]')).map(e => ({kind: e.dataset.kind, iteration: +e.dataset.iteration, before: +e.dataset.before, after: +e.dataset.after}))`)
	// The chart groups drops by iteration; the events are in order, and
	// so is a session's iteration count.
	if !slices.Equal(gotDrops, drops) {
		t.Errorf("chart drops\n got %v\nwant %v", gotDrops, drops)
	}
	gotSignals := eval[[]chartSignal](t, ctx, `Array.from(document.querySelectorAll('#chart [data-kind="stuck"]')).map(e => ({iteration: +e.dataset.iteration, pattern: e.dataset.pattern, action: e.dataset.action, response: e.dataset.response}))`)
	if !slices.Equal(gotSignals, signals) {
		t.Errorf("chart stuck signals\n got %v\nwant %v", gotSignals, signals)
	}
	limits := eval[map[string]int](t, ctx, `({window: +document.querySelector('#chart [data-kind="window"]').dataset.tokens, threshold: +document.querySelector('#chart [data-kind="threshold"]').dataset.tokens})`)
	if limits["window"] != 6000 || limits["threshold"] != s.cfg.CompactAt() {
		t.Errorf("chart limits %v, want window 6000 and threshold %d", limits, s.cfg.CompactAt())
	}

	// The task tree: the subtasks under their parent, all done.
	type taskNode struct {
		ID     string `json:"id"`
		Parent string `json:"parent"`
		Status string `json:"status"`
	}
	tree := eval[[]taskNode](t, ctx, `Array.from(document.querySelectorAll('#tasks li')).map(e => ({id: e.dataset.taskId, parent: e.dataset.parent, status: e.dataset.status}))`)
	want := []taskNode{{"R1", "", "done"}, {"D1", "", "done"}, {"D1.1", "D1", "done"}, {"D1.2", "D1", "done"}}
	if !slices.Equal(tree, want) {
		t.Errorf("task tree %v, want %v", tree, want)
	}

	// The activity: each step's tool calls, the rejection with its reason,
	// each stuck signal's diagnosis and what the builder did.
	calls := 0
	for _, env := range got {
		if env.Type == events.IterationCompleted {
			calls += len(decode[events.IterationRecord](t, env).ToolCalls)
		}
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#activity .call').length`); n != calls {
		t.Errorf("%d tool calls in the activity, want %d", n, calls)
	}
	rejection := eval[string](t, ctx, `document.querySelector('#activity .entry.rejected').innerText`)
	if !strings.Contains(rejection, "report.md is missing") || !strings.Contains(rejection, "report.md covers src01.txt to src06.txt") {
		t.Errorf("the rejection shows %q, want its feedback and unmet criterion", rejection)
	}
	for _, env := range got {
		if env.Type != events.IterationAnalyzed {
			continue
		}
		sig := decode[events.IterationAnalyzedData](t, env).Signal
		if sig == nil {
			continue
		}
		text := eval[string](t, ctx, fmt.Sprintf(`document.querySelector('#activity .entry[data-kind="stuck"][data-iteration="%d"]').innerText`, sig.Iteration))
		if !strings.Contains(text, sig.Diagnosis) || !strings.Contains(text, "builder:") || strings.Contains(text, "deciding") {
			t.Errorf("stuck signal at %d shows %q, want its diagnosis and what the builder did", sig.Iteration, text)
		}
	}

	// Tokens and cost by role, as the store counted them.
	usage, err := s.m.Store.Usage(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	type roleRow struct {
		Role   string  `json:"role"`
		Calls  int64   `json:"calls"`
		Input  int64   `json:"input"`
		Output int64   `json:"output"`
		Cost   float64 `json:"cost"`
	}
	rows := eval[[]roleRow](t, ctx, `Array.from(document.querySelectorAll('#usage tbody tr')).map(e => ({role: e.dataset.role, calls: +e.dataset.calls, input: +e.dataset.input, output: +e.dataset.output, cost: +(e.dataset.cost || 0)}))`)
	prices := map[string][2]float64{"builder": {3, 15}, "critic": {0.8, 4}}
	roles := 0
	for _, r := range rows {
		if r.Calls != usage[r.Role+":calls"] || r.Input != usage[r.Role+":input"] || r.Output != usage[r.Role+":output"] {
			t.Errorf("usage of %s: page %+v, store %d calls %d in %d out", r.Role, r, usage[r.Role+":calls"], usage[r.Role+":input"], usage[r.Role+":output"])
		}
		p := prices[r.Role]
		if want := (float64(r.Input)*p[0] + float64(r.Output)*p[1]) / 1e6; math.Abs(r.Cost-want) > 1e-9 {
			t.Errorf("cost of %s: %v, want %v", r.Role, r.Cost, want)
		}
		roles++
	}
	// Every role that made a call: the builder, the critic, the pruner and
	// the decomposer (the summarizer's compactions here need no model).
	if want := len(usage) / 3; roles != want || roles < 4 {
		t.Errorf("%d roles in the usage table, want %d", roles, want)
	}
	screenshot(t, ctx, "session-dark.png")
	do(t, ctx, chromedp.Click(chromedp.CSS("#theme")))
	screenshot(t, ctx, "session-light.png")
}
