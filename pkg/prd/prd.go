// Package prd owns the product requirements document a session works
// through: its tasks, their acceptance criteria and dependencies, and the
// validation that names the file, the task and the field that is wrong.
package prd

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/ralphmesh/ralph/pkg/gitref"
)

// PRD is a list of tasks with acceptance criteria.
type PRD struct {
	Title string `json:"title,omitempty" yaml:"title,omitempty"`
	// Branch is the git branch the session works on; empty, it is
	// ralph/<slug of the title>.
	Branch string `json:"branch_name,omitempty" yaml:"branch_name,omitempty"`
	Tasks  []Task `json:"tasks" yaml:"tasks"`
}

// Task is one unit of work. Verify is an optional shell command that the
// critic runs in the workspace before its review; exit 0 means it passes.
type Task struct {
	ID                 string   `json:"id" yaml:"id"`
	Title              string   `json:"title" yaml:"title"`
	Description        string   `json:"description,omitempty" yaml:"description,omitempty"`
	AcceptanceCriteria []string `json:"acceptance_criteria" yaml:"acceptance_criteria"`
	DependsOn          []string `json:"depends_on,omitempty" yaml:"depends_on,omitempty"`
	Verify             string   `json:"verify,omitempty" yaml:"verify,omitempty"`
	// ParentID is set on subtasks created by decomposition.
	ParentID string `json:"parent_id,omitempty" yaml:"parent_id,omitempty"`
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid PRD")

var taskIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Load reads and validates a PRD file within the default bounds (Config).
// YAML and JSON are both accepted; unknown fields are rejected so that a
// typo does not silently drop a criterion.
func Load(path string) (PRD, error) { return DefaultConfig().Load(path) }

// Parse decodes a PRD from JSON (ext ".json") or YAML (anything else) and
// validates it. A document that cannot be decoded gives a *DecodeError with
// the line and column of the problem. A Ralph prd.json (userStories) is
// read as ParseFile reads it; one whose stories all pass is
// ErrNothingToRun.
func Parse(data []byte, ext string) (PRD, error) {
	f, err := ParseFile(data, ext)
	if err != nil {
		return PRD{}, err
	}
	if len(f.Tasks) == 0 {
		return PRD{}, ErrNothingToRun
	}
	return f.PRD, nil
}

// ParseFile is Parse with what the file says besides the tasks: its
// format and, for a Ralph prd.json, the stories that pass already (which
// are skipped: a prd.json whose stories all pass has no tasks and no
// error) and their priorities. The tasks are in the order the session
// tries them: a prd.json's by priority, ties in file order.
func ParseFile(data []byte, ext string) (File, error) {
	var (
		p   PRD
		err error
	)
	format := FormatYAML
	if strings.EqualFold(ext, ".json") {
		if isRalph(data) {
			return decodeRalph(data)
		}
		format = FormatJSON
		p, err = decodeJSON(data)
	} else {
		p, err = decodeYAML(data)
	}
	if err != nil {
		return File{}, err
	}
	if err := p.Validate(); err != nil {
		return File{}, err
	}
	return File{PRD: p, Format: format}, nil
}

func taskLabel(i int, id string) string {
	if id != "" {
		return fmt.Sprintf("task %q", id)
	}
	return fmt.Sprintf("task %d", i+1)
}

// Validate checks ids, required fields, dependencies and cycles.
func (p PRD) Validate() error {
	if p.Branch != "" {
		if err := gitref.ValidBranch(p.Branch); err != nil {
			return fmt.Errorf("%w: field branch_name: %v", ErrInvalid, err)
		}
	}
	if len(p.Tasks) == 0 {
		return fmt.Errorf("%w: field tasks: at least one task is required", ErrInvalid)
	}
	seen := make(map[string]int, len(p.Tasks))
	for i, t := range p.Tasks {
		where := taskLabel(i, t.ID)
		if err := t.Validate(); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalid, where, err)
		}
		if _, dup := seen[t.ID]; dup {
			return fmt.Errorf("%w: %s: field id: duplicate task id", ErrInvalid, where)
		}
		seen[t.ID] = i
	}
	for _, t := range p.Tasks {
		for _, d := range t.DependsOn {
			if _, ok := seen[d]; !ok {
				return fmt.Errorf("%w: task %q: field depends_on: unknown task %q", ErrInvalid, t.ID, d)
			}
			if d == t.ID {
				return fmt.Errorf("%w: task %q: field depends_on: a task cannot depend on itself", ErrInvalid, t.ID)
			}
		}
	}
	if cycle := p.findCycle(seen); cycle != "" {
		return fmt.Errorf("%w: field depends_on: dependency cycle %s", ErrInvalid, cycle)
	}
	return nil
}

// Validate checks one task's own fields.
func (t Task) Validate() error {
	switch {
	case t.ID == "":
		return errors.New("field id: required")
	case !taskIDPattern.MatchString(t.ID):
		return fmt.Errorf("field id: %q must be 1-64 letters, digits, '_', '-' or '.'", t.ID)
	case strings.TrimSpace(t.Title) == "":
		return errors.New("field title: required")
	case len(t.AcceptanceCriteria) == 0:
		return errors.New("field acceptance_criteria: at least one criterion is required")
	}
	for i, c := range t.AcceptanceCriteria {
		if strings.TrimSpace(c) == "" {
			return fmt.Errorf("field acceptance_criteria[%d]: empty criterion", i)
		}
	}
	return nil
}

func (p PRD) findCycle(index map[string]int) string {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(p.Tasks))
	var path []string
	var visit func(i int) string
	visit = func(i int) string {
		color[i] = grey
		path = append(path, p.Tasks[i].ID)
		for _, d := range p.Tasks[i].DependsOn {
			j := index[d]
			switch color[j] {
			case grey:
				// The cycle starts where d is on the path; the tasks
				// before it only lead into the cycle.
				start := len(path) - 1
				for path[start] != d {
					start--
				}
				return strings.Join(append(path[start:], d), " -> ")
			case white:
				if c := visit(j); c != "" {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		color[i] = black
		return ""
	}
	for i := range p.Tasks {
		if color[i] == white {
			if c := visit(i); c != "" {
				return c
			}
		}
	}
	return ""
}

// SameWork reports whether t asks for the same work as o: the same title and
// the same acceptance criteria, ignoring case, spacing and the id. A
// "decomposition" into a task like this is no decomposition at all.
func (t Task) SameWork(o Task) bool {
	norm := func(x string) string { return strings.Join(strings.Fields(strings.ToLower(x)), " ") }
	if norm(t.Title) != norm(o.Title) || len(t.AcceptanceCriteria) != len(o.AcceptanceCriteria) {
		return false
	}
	for i := range t.AcceptanceCriteria {
		if norm(t.AcceptanceCriteria[i]) != norm(o.AcceptanceCriteria[i]) {
			return false
		}
	}
	return true
}

// CheckSubtasks applies the rules that stop runaway splitting to a
// decomposition of t, whoever proposes it: 2 to max subtasks, each valid,
// with an id neither repeated nor taken (taken reports the session's ids),
// none asking for t's own work again, and dependencies only on earlier
// subtasks.
func (t Task) CheckSubtasks(subs []Task, max int, taken func(id string) bool) error {
	if len(subs) < 2 || len(subs) > max {
		return fmt.Errorf("%d subtasks, want 2 to %d", len(subs), max)
	}
	seen := map[string]bool{}
	for i, st := range subs {
		if err := st.Validate(); err != nil {
			return fmt.Errorf("subtask %d: %w", i+1, err)
		}
		if seen[st.ID] || taken(st.ID) {
			return fmt.Errorf("subtask %d: id %q is already taken", i+1, st.ID)
		}
		if st.SameWork(t) {
			return fmt.Errorf("subtask %s is the parent task again", st.ID)
		}
		for _, d := range st.DependsOn {
			if !seen[d] {
				return fmt.Errorf("subtask %s: depends_on %q is not an earlier subtask", st.ID, d)
			}
		}
		seen[st.ID] = true
	}
	return nil
}
