// Package console owns how session events look to a person: one line per
// event with the task, iteration, tool calls, tokens and verdicts, used by
// `ralph run`, `ralph replay` and the console service that prints the
// progress of every session on the mesh.
package console

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Render turns one event into a human line (possibly several lines). It
// never fails: an event it cannot decode is shown by type. Each line is
// passed through Escape, so nothing an event carries (a task title, the
// model's text, a tool's arguments, a path) can move the cursor or fake a
// line: the only newlines in the result are those between Render's own
// lines.
func Render(env events.Envelope) string {
	lines := render(env)
	for i, l := range lines {
		lines[i] = Escape(l)
	}
	return strings.Join(lines, "\n")
}

// one is a rendering of one line.
func one(format string, a ...any) []string { return []string{fmt.Sprintf(format, a...)} }

// render is Render's lines before escaping; none for an event people need
// not see.
func render(env events.Envelope) []string {
	p := fmt.Sprintf("[%s]", env.Session)
	switch env.Type {
	case events.SessionStarted:
		var d events.SessionStartedData
		if env.Decode(&d) == nil {
			line := fmt.Sprintf("%s session started: %d tasks, workspace %s", p, len(d.PRD.Tasks), d.Workspace)
			if d.Git != nil {
				line += ", branch " + d.Git.Branch
			}
			return []string{line}
		}
	case events.TaskStarted:
		var d events.TaskStartedData
		if env.Decode(&d) == nil {
			return one("%s ▶ task %s: %s", p, d.Task.ID, d.Task.Title)
		}
	case events.IterationRequested:
		return nil
	case events.IterationCompleted:
		var r events.IterationRecord
		if env.Decode(&r) == nil {
			return renderIteration(p, r)
		}
	case events.IterationAnalyzed:
		var d events.IterationAnalyzedData
		if env.Decode(&d) == nil {
			if d.Signal == nil {
				return nil
			}
			s := d.Signal
			return one("%s   ⚠ stuck: %s (confidence %.2f) → %s: %s", p, s.Pattern, s.Confidence, s.Action, s.Diagnosis)
		}
	case events.CritiqueRequested:
		var d events.CritiqueRequestedData
		if env.Decode(&d) == nil {
			return one("%s   critic reviewing %s (attempt %d)", p, d.Task.ID, d.Attempt)
		}
	case events.CritiqueCompleted:
		var d events.CritiqueCompletedData
		if env.Decode(&d) == nil {
			return renderVerdict(p, d)
		}
	case events.TaskCompleted:
		var d events.TaskCompletedData
		if env.Decode(&d) == nil {
			line := fmt.Sprintf("%s ✔ task %s done after %d iterations, %d review(s)", p, d.TaskID, d.Iterations, d.Attempts)
			if d.Commit != nil {
				line += ": committed " + CommitLine(*d.Commit)
			}
			return []string{line}
		}
	case events.MemoryUpdated:
		var d events.MemoryUpdatedData
		if env.Decode(&d) == nil {
			return renderMemory(p, d)
		}
	case events.SessionCompleted:
		var d events.SessionCompletedData
		if env.Decode(&d) == nil {
			lines := one("%s ✔ session completed: %d tasks, %d iterations, %d tokens", p, d.Tasks, d.Iterations, d.Tokens)
			if d.Branch != "" {
				lines = append(lines, fmt.Sprintf("%s   %d commit(s) on branch %s:", p, len(d.Commits), d.Branch))
				for _, c := range d.Commits {
					lines = append(lines, fmt.Sprintf("%s     %s", p, CommitLine(c)))
				}
			}
			return lines
		}
	case events.SessionFailed:
		var d events.SessionFailedData
		if env.Decode(&d) == nil {
			return one("%s ✘ session failed: %s", p, d.Reason)
		}
	case events.SessionEscalated:
		var d events.SessionEscalatedData
		if env.Decode(&d) == nil {
			return one("%s ✋ session escalated: %s (tried: %s)", p, d.Reason, strings.Join(d.Tried, ", "))
		}
	case events.SessionResumed:
		var d events.SessionResumedData
		if env.Decode(&d) == nil {
			return one("%s ▶ session resumed at task %s with guidance: %s", p, env.Task, firstLine(d.Message))
		}
	case events.CancelRequested:
		var d events.CancelRequestedData
		if env.Decode(&d) == nil {
			if d.Reason == "" {
				return one("%s ■ cancel asked", p)
			}
			return one("%s ■ cancel asked: %s", p, firstLine(d.Reason))
		}
	case events.SessionCancelled:
		var d events.SessionCancelledData
		if env.Decode(&d) == nil {
			return one("%s ■ session cancelled at task %s after %d iterations: %s", p, d.TaskID, d.Iterations, d.Reason)
		}
	case events.PruneRequested:
		var d events.PruneRequestedData
		if env.Decode(&d) == nil {
			return one("%s   pruning the context of %s (%s)", p, d.TaskID, d.Signal.Pattern)
		}
	case events.PruneCompleted:
		var d events.PruneCompletedData
		if env.Decode(&d) == nil {
			if d.Error != "" {
				return one("%s   pruning %s failed: %s", p, d.TaskID, d.Error)
			}
			return one("%s   pruned %s: %d → %d tokens, %d unit(s) removed, %d kept", p, d.TaskID, d.TokensBefore, d.TokensAfter, len(d.RemovedUnits), len(d.KeptUnits))
		}
	case events.DecomposeRequested:
		var d events.DecomposeRequestedData
		if env.Decode(&d) == nil {
			return one("%s   decomposing %s (%s)", p, d.Task.ID, d.Signal.Pattern)
		}
	case events.TaskDecomposed:
		var d events.TaskDecomposedData
		if env.Decode(&d) == nil {
			if d.Error != "" {
				return one("%s   %s could not be decomposed: %s", p, d.ParentID, d.Error)
			}
			lines := one("%s   %s split into %d subtasks:", p, d.ParentID, len(d.Subtasks))
			for _, t := range d.Subtasks {
				lines = append(lines, fmt.Sprintf("%s     · %s: %s", p, t.ID, t.Title))
			}
			return lines
		}
	}
	return one("%s %s", p, env.Type)
}

// CommitLine is a commit as `git log --oneline` shows it, and whether it
// was pushed when a push was asked for.
func CommitLine(c events.Commit) string {
	line := c.Short() + " " + c.Subject
	switch {
	case c.Pushed:
		line += " (pushed)"
	case c.PushError != "":
		line += " (not pushed: " + firstLine(c.PushError) + ")"
	}
	return line
}

// renderMemory says what the session's memory took in from a task.
func renderMemory(p string, d events.MemoryUpdatedData) []string {
	switch {
	case d.Error != "":
		return one("%s   memory not updated from %s: %s", p, d.TaskID, d.Error)
	case d.How == "already":
		return nil // a redelivery: the line was printed the first time
	}
	line := fmt.Sprintf("%s   memory: %d note(s) from %s (%s), %d of %d tokens, %d task(s)", p, d.Notes, d.TaskID, d.How, d.Tokens, d.MaxTokens, d.Tasks)
	if d.Resummarized != "" {
		line += ", summarised again (" + d.Resummarized + ")"
	}
	return []string{line}
}

func renderIteration(p string, r events.IterationRecord) []string {
	lines := one("%s   iteration %d (task %s): %d tool call(s), tokens in %d / out %d, context %d",
		p, r.Iteration, r.TaskID, len(r.ToolCalls), r.Usage.InputTokens, r.Usage.OutputTokens, r.ContextTokens)
	for _, c := range r.ToolCalls {
		status := "ok"
		switch {
		case c.Error != "":
			status = "error: " + firstLine(c.Error)
		case c.ExitCode != 0:
			status = fmt.Sprintf("exit %d", c.ExitCode)
		}
		lines = append(lines, fmt.Sprintf("%s     · %s %s → %s", p, c.Name, compactArgs(c.Args), status))
	}
	if r.ClaimedDone {
		lines = append(lines, fmt.Sprintf("%s     says done: %s", p, firstLine(r.AssistantText)))
	}
	return lines
}

func renderVerdict(p string, d events.CritiqueCompletedData) []string {
	var b strings.Builder
	if d.Verdict.Approved {
		fmt.Fprintf(&b, "%s   critic approved %s", p, d.TaskID)
	} else {
		fmt.Fprintf(&b, "%s   critic requested changes on %s: %s", p, d.TaskID, firstLine(d.Verdict.Feedback))
	}
	if d.Verify != nil {
		fmt.Fprintf(&b, " (verify `%s` exit %d)", d.Verify.Command, d.Verify.ExitCode)
	}
	return []string{b.String()}
}

// compactArgs shows a call's arguments on one line; file contents are
// summarised by size rather than cut, so the line stays readable.
func compactArgs(raw json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return string(raw)
	}
	var parts []string
	for _, k := range []string{"path", "command", "pattern", "id"} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	for _, k := range []string{"content", "new"} {
		if v, ok := m[k].(string); ok {
			parts = append(parts, fmt.Sprintf("%s=<%d bytes>", k, len(v)))
		}
	}
	return strings.Join(parts, " ")
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
