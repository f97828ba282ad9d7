package compactbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
	"github.com/ralphmesh/ralph/services/builder"
)

// benchTask is the task the session works on.
var benchTask = prd.Task{
	ID:    "T1",
	Title: "Write the speaker profiles and the programme overview for Northwind Summit 2026",
	Description: "The programme committee has confirmed twelve speakers. Their interviews and career notes are in sources/; " +
		"the house style and the checks are described in brief.md.",
	AcceptanceCriteria: []string{
		"one profile per speaker under profiles/, numbered like the sources, each with Role, Based in, Talk and Sources lines and a pull quote",
		"every file named in a profile's Sources: line exists (sh scripts/check_links.sh passes)",
		"final.md introduces the programme and has one section per speaker, drawn from that speaker's profile, with the pull quote",
		"no profile is longer than 450 words and final.md is no longer than 2,500 words",
	},
	Verify: cmdCheckProfiles + " && " + cmdCheckLinks + " && " + cmdCheckFinal,
}

// The workspace's check scripts, run with `sh scripts/...`.
const (
	cmdCheckProfiles = "sh scripts/check_profiles.sh"
	cmdCheckLinks    = "sh scripts/check_links.sh"
	cmdCheckFinal    = "sh scripts/check_final.sh"
)

// workspaceDir is where the builder would run the session. InitialContext
// takes it; nothing the model sees names it.
const workspaceDir = "/workspace/northwind"

// Session is a generated builder session.
type Session struct {
	Task prd.Task
	// Files is the workspace the session starts from.
	Files map[string]string
	// Initial is the context the task starts with (system prompt, task),
	// as builder.InitialContext makes it, tokens counted.
	Initial []units.Unit
	// Iterations are the builder steps in order, as the builder records
	// them: the assistant message with its calls, then one result per call.
	Iterations []Iteration
	// Facts are what must still be in the context the builder sees at
	// the end.
	Facts []Fact
}

// Iteration is one builder step.
type Iteration struct {
	Step         int
	Units        []units.Unit
	FilesChanged []string
}

// Done reports whether the step is the builder's final reply (no calls).
func (it Iteration) Done() bool { return len(it.Units) == 1 && len(it.Units[0].Calls) == 0 }

// Tokens is the iteration's units' total.
func (it Iteration) Tokens() int { return units.Total(it.Units) }

// Fact kinds.
const (
	FactInstruction     = "instruction"
	FactActiveDraft     = "active_draft"
	FactModifiedFile    = "modified_file"
	FactUnresolvedError = "unresolved_error"
)

// Fact is something the builder needs at the end of the session. It is
// kept when every one of its Needles is in the context's visible text.
type Fact struct {
	Kind    string
	Name    string
	Needles []string
}

// call is one tool call the scripted builder makes.
type call struct {
	name string
	args map[string]any
}

func readFile(path string) call { return call{tools.ReadFile, map[string]any{"path": path}} }
func writeFile(path, content string) call {
	return call{tools.WriteFile, map[string]any{"path": path, "content": content}}
}
func editFile(path, old, repl string) call {
	return call{tools.EditFile, map[string]any{"path": path, "old": old, "new": repl}}
}
func listDir(path string) call { return call{tools.ListDir, map[string]any{"path": path}} }
func search(pattern, path string) call {
	return call{tools.Search, map[string]any{"pattern": pattern, "path": path}}
}
func run(command string) call { return call{tools.Run, map[string]any{"command": command}} }

// generator records steps the way the builder does, running the calls
// with the builder's own tools (pkg/tools) in a temporary workspace, the
// check scripts included.
type generator struct {
	exec  *tools.Executor
	count func(string) int
	calls int
	its   []Iteration
	// lastRun is the latest output of each command run, for the
	// unresolved errors at the end.
	lastRun map[string]tools.Result
	runs    []string
	changed []string
}

// Generate builds the session. count is the builder's token counter
// (pkg/tokens); the same counter always gives the same session.
func Generate(count func(string) int) (Session, error) {
	dir, err := os.MkdirTemp("", "ralph-compactbench-")
	if err != nil {
		return Session{}, fmt.Errorf("generate session: %w", err)
	}
	defer os.RemoveAll(dir)
	files := initialFiles()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return Session{}, fmt.Errorf("generate session: %w", err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return Session{}, fmt.Errorf("generate session: %w", err)
		}
	}
	ws, err := tools.NewWorkspace(dir)
	if err != nil {
		return Session{}, fmt.Errorf("generate session: %w", err)
	}
	g := &generator{exec: tools.NewExecutor(ws, nil, tools.Options{}), count: count, lastRun: map[string]tools.Result{}}
	s := Session{Task: benchTask, Files: files}
	s.Initial = builder.InitialContext(workspaceDir, benchTask)
	for i := range s.Initial {
		s.Initial[i].Tokens = count(s.Initial[i].Content)
	}
	if err := g.script(); err != nil {
		return Session{}, fmt.Errorf("generate session: %w", err)
	}
	s.Iterations = g.its
	s.Facts = g.facts(s.Task)
	return s, nil
}

// script is the session: explore, draft twelve profiles with checks
// along the way, reread them all and write the overview.
func (g *generator) script() error {
	steps := []struct {
		text  string
		calls []call
	}{
		{"I'll start by looking at the workspace and the sources it holds.", []call{listDir("."), listDir("sources")}},
		{"Reading the brief first, so that the profiles follow the house style.", []call{readFile("brief.md")}},
		{"Let me see what the profile check enforces before I draft anything.", []call{readFile("scripts/check_profiles.sh")}},
		{"Writing an outline of final.md first, so that each profile is drafted with the overview in mind.",
			[]call{writeFile("notes/outline.md", outline())}},
	}
	for _, st := range steps {
		if err := g.step(st.text, st.calls...); err != nil {
			return err
		}
	}
	for i, s := range speakers {
		intro := ""
		if i == 8 {
			// The agent notes the broken reference and moves on.
			intro = fmt.Sprintf("The link check fails on p%s: it cites a notes file for %s that is not in sources/. "+
				"I will fix that reference once final.md is drafted. ", number(6), speakers[6].Name)
		}
		if err := g.step(intro+fmt.Sprintf("Reading %s's interview.", s.Name), readFile(interviewPath(i))); err != nil {
			return err
		}
		if s.SecondSource {
			if err := g.step(fmt.Sprintf("Now the committee's career notes on %s.", s.first()), readFile(cvPath(i))); err != nil {
				return err
			}
		}
		if i%3 == 2 {
			if err := g.step(fmt.Sprintf("Searching the other sources for mentions of %s, for cross-references in the overview.", s.surname()),
				search(s.surname(), "sources")); err != nil {
				return err
			}
		}
		if err := g.step(fmt.Sprintf("Drafting %s from %s's sources.", profilePath(i), s.first()), writeFile(profilePath(i), profile(i))); err != nil {
			return err
		}
		switch i {
		case 3:
			p := profilePath(2)
			head := fmt.Sprintf("# %s\n\n", speakers[2].Name)
			if err := g.step("Four profiles drafted; running the profile check.", run(cmdCheckProfiles)); err != nil {
				return err
			}
			if err := g.step(fmt.Sprintf("%s lacks the Role line; adding it under the heading.", p),
				editFile(p, head+"Based in:", head+roleLine(2)+"Based in:")); err != nil {
				return err
			}
			if err := g.step("Re-running the profile check.", run(cmdCheckProfiles)); err != nil {
				return err
			}
		case 7:
			if err := g.step("Eight profiles drafted; checking the source references.", run(cmdCheckLinks)); err != nil {
				return err
			}
		}
	}
	for _, i := range []int{1, 4, 9} {
		if err := g.step(fmt.Sprintf("Tightening a generic sentence in %s.", profilePath(i)),
			editFile(profilePath(i), routineSentence(i), revisedRoutineSentence(i))); err != nil {
			return err
		}
	}
	if err := g.step("All twelve profiles drafted; running the profile check on all of them.", run(cmdCheckProfiles)); err != nil {
		return err
	}
	for i := range speakers {
		if err := g.step(fmt.Sprintf("Rereading %s before writing the overview.", profilePath(i)), readFile(profilePath(i))); err != nil {
			return err
		}
	}
	q := speakers[quoteless]
	section := finalSection(quoteless, false)
	tail := []struct {
		text  string
		calls []call
	}{
		{"Writing final.md from the twelve profiles.", []call{writeFile("final.md", final())}},
		{"Checking final.md.", []call{run(cmdCheckFinal)}},
		{fmt.Sprintf("Adding %s's pull quote to his section.", q.Name),
			[]call{editFile("final.md", section, section+fmt.Sprintf("\n> \"%s\"\n", q.Quote))}},
		{"Re-running the final check.", []call{run(cmdCheckFinal)}},
		{"Polishing the opening sentence of final.md.", []call{editFile("final.md", finalIntro, finalIntroRevised)}},
		{"final.md introduces the programme and has a section with a pull quote for each of the twelve speakers, drawn " +
			"from their profiles; the profile and final checks pass. One thing is still open: the link check failed on " +
			"the seventh profile, which cites a notes file that was never provided, and that reference needs the " +
			"committee's answer before it can be fixed.", nil},
	}
	for _, st := range tail {
		if err := g.step(st.text, st.calls...); err != nil {
			return err
		}
	}
	return nil
}

// step records one builder step: the assistant message with its calls,
// then each call's result, with the builder's ids, turns and token counts.
func (g *generator) step(text string, calls ...call) error {
	step := len(g.its) + 1
	msg := units.Unit{
		ID: fmt.Sprintf("assistant-%d", step), Role: openai.ChatMessageRoleAssistant, Kind: units.KindMessage,
		Content: text, Turn: step,
	}
	it := Iteration{Step: step}
	var results []units.Unit
	for i, c := range calls {
		g.calls++
		args, err := encodeArgs(c.args)
		if err != nil {
			return err
		}
		uc := units.Call{ID: fmt.Sprintf("call_%d", g.calls), Name: c.name, Args: args}
		msg.Calls = append(msg.Calls, uc)
		res, err := g.run(c, args)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		content := res.Text(c.name)
		// A larger output would become an artifact pointer in the builder,
		// which the session avoids so that every read is seen whole.
		if inline := builder.DefaultConfig().InlineOutputBytes; len(content) > inline {
			return fmt.Errorf("step %d: %s output is %d bytes, over the builder's inline limit", step, c.name, len(content))
		}
		results = append(results, units.Unit{
			ID: fmt.Sprintf("tool-%d-%d", step, i), Role: openai.ChatMessageRoleTool, Kind: units.KindToolResult,
			Tool: c.name, CallID: uc.ID, Args: json.RawMessage(args), Content: content, Turn: step, Tokens: g.count(content),
		})
		for _, f := range res.FilesChanged {
			if !slices.Contains(it.FilesChanged, f) {
				it.FilesChanged = append(it.FilesChanged, f)
			}
			if !slices.Contains(g.changed, f) {
				g.changed = append(g.changed, f)
			}
		}
	}
	// The builder's count: the content plus each call's name and arguments.
	msg.Tokens = g.count(msg.Content)
	for _, c := range msg.Calls {
		msg.Tokens += g.count(c.Name) + g.count(c.Args)
	}
	it.Units = append([]units.Unit{msg}, results...)
	g.its = append(g.its, it)
	return nil
}

// run executes one call. A tool error is part of the session (the builder
// records it); an executor error is a broken benchmark.
func (g *generator) run(c call, args string) (tools.Result, error) {
	res, err := g.exec.Execute(context.Background(), c.name, args)
	if err != nil {
		return res, err
	}
	if c.name == tools.Run {
		cmd, _ := c.args["command"].(string)
		if _, seen := g.lastRun[cmd]; !seen {
			g.runs = append(g.runs, cmd)
		}
		g.lastRun[cmd] = res
	}
	return res, nil
}

// encodeArgs encodes arguments as a tool-calling model sends them: one
// compact JSON object, keys sorted, nothing HTML-escaped.
func encodeArgs(args map[string]any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(args); err != nil {
		return "", fmt.Errorf("encode tool arguments: %w", err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// facts lists what the builder must still see at the end: the task's
// title and acceptance criteria, the active draft (final.md as last
// written, with every later edit), every file the session modified, and
// the error lines of every check whose latest run failed.
func (g *generator) facts(t prd.Task) []Fact {
	var fs []Fact
	fs = append(fs, Fact{Kind: FactInstruction, Name: "task title", Needles: []string{fmt.Sprintf("Task %s: %s", t.ID, t.Title)}})
	for i, c := range t.AcceptanceCriteria {
		fs = append(fs, Fact{Kind: FactInstruction, Name: fmt.Sprintf("acceptance criterion %d", i+1), Needles: []string{c}})
	}
	var draft []string
	for _, it := range g.its {
		for _, c := range it.Units[0].Calls {
			var a map[string]string
			if json.Unmarshal([]byte(c.Args), &a) != nil || a["path"] != "final.md" {
				continue
			}
			switch c.Name {
			case tools.WriteFile:
				draft = []string{a["content"]}
			case tools.EditFile:
				draft = append(draft, a["new"])
			}
		}
	}
	fs = append(fs, Fact{Kind: FactActiveDraft, Name: "final.md as last written and edited", Needles: draft})
	for _, f := range g.changed {
		fs = append(fs, Fact{Kind: FactModifiedFile, Name: f, Needles: []string{f}})
	}
	for _, cmd := range g.runs {
		res := g.lastRun[cmd]
		if res.ExitCode == 0 {
			continue
		}
		for _, l := range strings.Split(res.Output, "\n") {
			if strings.HasPrefix(l, "error: ") {
				fs = append(fs, Fact{Kind: FactUnresolvedError, Name: l, Needles: []string{l}})
			}
		}
	}
	return fs
}

// VisibleText is what the builder model reads of a context: every unit's
// content and every call's name and arguments, raw and with their string
// values decoded (a draft's newlines are escaped in the raw JSON).
func VisibleText(ctx []units.Unit) string {
	var b strings.Builder
	for _, u := range ctx {
		b.WriteString(u.Content)
		b.WriteString("\n")
		args := []string{string(u.Args)}
		if u.Kind != units.KindToolCall {
			// A result's Args are not sent to the model.
			args = nil
		}
		for _, c := range u.Calls {
			b.WriteString(c.Name + "\n")
			args = append(args, c.Args)
		}
		for _, a := range args {
			b.WriteString(a)
			b.WriteString("\n")
			var m map[string]any
			if json.Unmarshal([]byte(a), &m) == nil {
				keys := make([]string, 0, len(m))
				for k := range m {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				for _, k := range keys {
					if s, ok := m[k].(string); ok {
						b.WriteString(s)
						b.WriteString("\n")
					}
				}
			}
		}
	}
	return b.String()
}

// CheckFacts returns the names of the facts ctx lost.
func CheckFacts(facts []Fact, ctx []units.Unit) (lost []string) {
	text := VisibleText(ctx)
	for _, f := range facts {
		for _, n := range f.Needles {
			if !strings.Contains(text, n) {
				lost = append(lost, f.Kind+": "+f.Name)
				break
			}
		}
	}
	return lost
}

// unresolvedBullet starts the lines the executor's ground-truth check adds
// to a checkpoint for an unresolved error (compaction.AppendMissingFacts).
const unresolvedBullet = "- Unresolved: "

// FalseClaims returns the "Unresolved:" lines of ctx that name no error
// still unresolved at the end of the session.
func FalseClaims(facts []Fact, ctx []units.Unit) []string {
	open := map[string]bool{}
	for _, f := range facts {
		if f.Kind == FactUnresolvedError {
			open[f.Name] = true
		}
	}
	var out []string
	for _, u := range ctx {
		for _, l := range strings.Split(u.Content, "\n") {
			if claim, ok := strings.CutPrefix(strings.TrimSpace(l), unresolvedBullet); ok && !open[claim] {
				out = append(out, claim)
			}
		}
	}
	return out
}
