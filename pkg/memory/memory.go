// Package memory owns what a session carries from one task into the next
// (ADR-003's third phase and the utility-aware plan's workstream 6,
// docs/design-origins.md): the settings (RALPH_MEMORY, RALPH_MEMORY_*), the
// shape of the memory — ADR-003's four-section summary, each note tagged
// with the task that learned it — the bounded digest of a finished task
// that the summarizer model extracts learnings from, the learnings taken
// without a model when it is unavailable, the extractive bound, and the
// unit every later task starts with.
//
// It is pure: no NATS, Redis, clock or model. The summarizer extracts and
// stores the memory (services/summarizer, memory.go), the builder's shell
// reads it into a starting task's context (services/builder), and the
// planner keeps that unit whole (pkg/compaction, IsMemoryUnit).
package memory

import (
	"regexp"
	"slices"
	"strings"
)

// Memory is a session's memory as the store keeps it.
type Memory struct {
	// Text is the memory as a task reads it: Notes rendered.
	Text string `json:"text"`
	// Tokens is Text's size, which the bound is held to.
	Tokens int `json:"tokens"`
	// Tasks are the tasks whose learnings were taken in, in that order,
	// each once, whether the model or the extractive path did it: a
	// redelivered task.completed is not learned twice, and a starting task
	// knows whose learnings it waits for.
	Tasks []string `json:"tasks,omitempty"`
	// Resummaries counts the times the memory outgrew its bound and was
	// summarised again.
	Resummaries int `json:"resummaries,omitempty"`
}

// Covers reports whether the memory has taken in every one of tasks.
func (m Memory) Covers(tasks []string) bool {
	for _, t := range tasks {
		if !slices.Contains(m.Tasks, t) {
			return false
		}
	}
	return true
}

// Section is one of the four sections of ADR-003's summary, which the
// memory keeps: decisions, errors with their solutions, files changed, and
// the rest a later task needs (conventions, commands that work).
type Section int

// The sections, in the order the memory shows them.
const (
	KeyDecisions Section = iota
	ErrorsAndSolutions
	ModifiedFiles
	CriticalContext
)

var headings = [...]string{"## Key Decisions", "## Errors & Solutions", "## Modified Files", "## Critical Context"}

// Heading is the section's heading line.
func (s Section) Heading() string { return headings[s] }

// Note is one bullet of the memory: what a task learned, in whole lines
// (a note of several lines keeps them all).
type Note struct {
	Section Section
	// Task is the task that learned it; "" when it is not known (a model's
	// re-summary that dropped the tag).
	Task string
	Text string
}

// Notes are a memory's notes in the order they were learned.
type Notes []Note

// Render writes the notes under their headings, sections in order and
// notes in theirs, leaving out empty sections: "- [T1] text", with the
// later lines of a note indented under it.
func (ns Notes) Render() string {
	var b strings.Builder
	for s := range headings {
		first := true
		for _, n := range ns {
			if n.Section != Section(s) {
				continue
			}
			if first {
				if b.Len() > 0 {
					b.WriteString("\n")
				}
				b.WriteString(headings[s] + "\n")
				first = false
			}
			b.WriteString(n.bullet() + "\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (n Note) bullet() string {
	tag := ""
	if n.Task != "" {
		tag = "[" + n.Task + "] "
	}
	return "- " + tag + strings.ReplaceAll(n.Text, "\n", "\n  ")
}

var (
	tagRE    = regexp.MustCompile(`^\[([^\]\s]{1,64})\]\s*`)
	bulletRE = regexp.MustCompile(`^(?:[-*+•]|\d{1,3}[.)])\s+`)
)

// Parse reads a memory or a model's summary in the four-section shape back
// into notes. A bullet's "[task]" tag names its task; a bullet without one
// gets task. A code fence around the whole is not a note. Lines under a heading that is none of the four (a model's
// "## Conventions", say), or before any heading, are critical context; an
// indented line continues the note above it; every other line is a note
// of its own. Nothing is dropped but blank lines and headings.
func Parse(text, task string) Notes {
	var out Notes
	section := CriticalContext
	for _, raw := range strings.Split(text, "\n") {
		line := strings.TrimRight(raw, " \t\r")
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "```"):
			// Blank, or the fence a model may wrap its answer in.
			continue
		case strings.HasPrefix(trimmed, "#"):
			section = sectionOf(trimmed)
			continue
		case len(out) > 0 && line != trimmed && !bulletRE.MatchString(trimmed):
			// An indented line that starts no bullet continues the note.
			out[len(out)-1].Text += "\n" + trimmed
			continue
		}
		body := bulletRE.ReplaceAllString(trimmed, "")
		n := Note{Section: section, Task: task}
		if m := tagRE.FindStringSubmatch(body); m != nil {
			n.Task, body = m[1], body[len(m[0]):]
		}
		if body = strings.TrimSpace(body); body != "" {
			n.Text = body
			out = append(out, n)
		}
	}
	return out
}

// sectionOf maps a heading to its section by its words, so "### Errors and
// solutions" and "## Files changed" land where they belong.
func sectionOf(heading string) Section {
	h := strings.ToLower(heading)
	switch {
	case strings.Contains(h, "decision"):
		return KeyDecisions
	case strings.Contains(h, "error"):
		return ErrorsAndSolutions
	case strings.Contains(h, "file"):
		return ModifiedFiles
	}
	return CriticalContext
}

// Add returns memory with learned's notes after its own, less those that
// say again what a note of the same section already says (compared without
// case, spacing or trailing punctuation): a fact every task rediscovers is
// one note, the first task's.
func Add(memory, learned Notes) Notes {
	out := slices.Clone(memory)
	seen := map[string]bool{}
	for _, n := range out {
		seen[n.key()] = true
	}
	for _, n := range learned {
		if k := n.key(); !seen[k] {
			seen[k] = true
			out = append(out, n)
		}
	}
	return out
}

func (n Note) key() string {
	t := strings.ToLower(strings.Join(strings.Fields(n.Text), " "))
	return string(rune('0'+n.Section)) + strings.TrimRight(t, ".;:,!")
}

// Mentions reports whether any note names s.
func (ns Notes) Mentions(s string) bool {
	return slices.ContainsFunc(ns, func(n Note) bool { return strings.Contains(n.Text, s) })
}
