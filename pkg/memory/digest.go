package memory

import (
	"fmt"
	"strings"

	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// How much of one result's text the digest shows, by what the result was
// for (the planner's lanes): what the task wrote from or edited against
// (source evidence, active writing) may carry the conventions it followed;
// any other result is shown only when it is short, where a short output is
// often the fact itself ("FOO must be set to 1").
const (
	digestEvidenceTokens = 200
	digestTraceTokens    = 80
	digestMessageTokens  = 60
)

// Digest is what the summarizer model is given of a finished task to
// extract its learnings from: the task, the files it changed, its work in
// order and the builder's closing message, within maxTokens — never the
// whole context, which can be as large as the builder's window (the
// utility-aware plan's workstream 6: no document-scale payloads).
//
// The work is digested by what each unit was for (compaction.Classify):
// every tool call is one line with how it ended (the error line of a
// failure); a result's own text follows only when the task drew on it
// (source evidence, active writing) or it is short, in whole lines; an
// output stored as an artifact is named by its id, never copied; the
// reviewer's and a person's instructions and the builder's messages keep
// their first lines. When the work does not fit, its lines are taken as
// compaction.Extract takes them (errors, paths, decisions first), whole.
// count measures tokens (nil: about four bytes a token).
func Digest(t Task, stored []units.Unit, maxTokens int, count func(string) int) string {
	count = counter(count)
	us := expand(stored)
	lanes := compaction.Classify(compaction.Document{Task: compaction.Task{Goal: t.ID + ": " + t.Title}, Units: stored})
	ss := steps(us)
	byUnit := make(map[int]step, len(ss))
	for _, s := range ss {
		byUnit[s.unit] = s
	}

	var head strings.Builder
	fmt.Fprintf(&head, "Task %s: %s\nThe reviewer approved it.\n", t.ID, t.Title)
	if files := writtenPaths(t.FilesChanged, ss); len(files) > 0 {
		fmt.Fprintf(&head, "Files it changed: %s\n", strings.Join(files, ", "))
	}
	tail := ""
	if c := closing(t, us); c != "" {
		tail = "The builder's closing message:\n" + compaction.Extract(c, max(maxTokens/4, 16), count)
	}

	var work []string
	headN := compaction.StableHead(us)
	for i, u := range us {
		if i < headN || compaction.IsMemoryUnit(u) {
			continue // the task itself, the system prompt, earlier memory
		}
		switch {
		case u.Kind == units.KindToolCall:
			// Its result says it, with how it ended.
		case u.Kind == units.KindToolResult:
			work = append(work, resultLines(u, byUnit[i], lanes[u.ID], count)...)
		case u.Kind == units.KindSummary:
			work = append(work, "Earlier work on the task (a checkpoint):", indent(compaction.Extract(u.Content, digestEvidenceTokens, count)))
		case u.Role == "user":
			work = append(work, "Instruction: "+firstLines(u.Content, digestMessageTokens, count))
		case u.Role == "assistant" && strings.TrimSpace(u.Content) != "":
			work = append(work, "Builder: "+firstLines(u.Content, digestMessageTokens, count))
		}
	}

	fixed := head.String() + "Its work, in order:\n" + "\n" + tail
	room := maxTokens - count(fixed)
	body := strings.Join(work, "\n")
	if count(body) > room {
		body = compaction.Extract(body, max(room, 0), count)
	}
	out := strings.TrimSpace(head.String() + "Its work, in order:\n" + body + "\n" + tail)
	if count(out) > maxTokens {
		// A head or a closing message too large for its share: the whole,
		// in whole lines.
		out = compaction.Extract(out, maxTokens, count)
	}
	return out
}

// resultLines digest one tool result: the call and how it ended, then, by
// its lane and size, its text or where it is kept.
func resultLines(u units.Unit, s step, lane compaction.Lane, count func(string) int) []string {
	call := s.tool
	if s.subject != "" {
		call += " " + quote(s.tool, s.subject)
	}
	ended := "ok"
	if s.failed {
		ended = "failed"
		if s.errLine != "" {
			ended += ": " + s.errLine
		}
	}
	lines := []string{fmt.Sprintf("- %s -> %s", call, ended)}
	text := resultText(u)
	if text == "" || s.tool == tools.WriteFile || s.tool == tools.EditFile {
		// A write's result only says that it was written; the file holds it.
		return lines
	}
	budget := digestTraceTokens
	if lane == compaction.LaneSourceEvidence || lane == compaction.LaneActiveWrite {
		budget = digestEvidenceTokens
	}
	switch {
	case s.artifact != "":
		lines = append(lines, "  (its whole output is "+tools.ArtifactPointer("kept", s.artifact)+")")
	case count(text) <= budget:
		lines = append(lines, indent(text))
	case lane == compaction.LaneSourceEvidence || lane == compaction.LaneActiveWrite:
		lines = append(lines, indent(compaction.Extract(text, budget, count)))
	}
	return lines
}

// resultText is a result's text without the "exit code N" header of a run,
// which the call's line already says.
func resultText(u units.Unit) string {
	text := strings.TrimSpace(u.Content)
	if rest, ok := strings.CutPrefix(text, "exit code "); ok && u.Tool == tools.Run {
		_, text, _ = strings.Cut(rest, "\n")
	}
	return strings.TrimSpace(text)
}

// quote shows a command in backquotes, a path as it is.
func quote(tool, subject string) string {
	if tool == tools.Run {
		return "`" + subject + "`"
	}
	return subject
}

// firstLines are text's first whole lines within maxTokens, on one line
// each, ending with "..." when some were left out.
func firstLines(text string, maxTokens int, count func(string) int) string {
	var kept []string
	used := 0
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		c := count(l) + 1
		if used+c > maxTokens && len(kept) > 0 {
			return strings.Join(kept, " / ") + " ..."
		}
		kept = append(kept, l)
		used += c
	}
	return strings.Join(kept, " / ")
}

func indent(text string) string {
	if text == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(text, "\n", "\n  ")
}
