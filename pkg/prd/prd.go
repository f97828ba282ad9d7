// Package prd owns the product requirements document a session works
// through: its tasks, their acceptance criteria and dependencies, and the
// validation that names the file, the task and the field that is wrong.
package prd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// PRD is a list of tasks with acceptance criteria.
type PRD struct {
	Title string `json:"title,omitempty" yaml:"title,omitempty"`
	Tasks []Task `json:"tasks" yaml:"tasks"`
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

// Load reads and validates a PRD file. YAML and JSON are both accepted;
// unknown fields are rejected so that a typo does not silently drop a
// criterion.
func Load(path string) (PRD, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return PRD{}, fmt.Errorf("read PRD %s: %w", path, err)
	}
	p, err := Parse(data, filepath.Ext(path))
	if err != nil {
		return PRD{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Parse decodes a PRD from JSON (ext ".json") or YAML (anything else) and
// validates it.
func Parse(data []byte, ext string) (PRD, error) {
	var p PRD
	if strings.EqualFold(ext, ".json") {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			if located := locateJSON(data); located != nil {
				return PRD{}, located
			}
			return PRD{}, fmt.Errorf("%w: bad JSON: %v", ErrInvalid, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return PRD{}, fmt.Errorf("%w: bad JSON: data after the document", ErrInvalid)
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&p); err != nil {
			if located := locateYAML(data); located != nil {
				return PRD{}, located
			}
			return PRD{}, fmt.Errorf("%w: bad YAML: %v", ErrInvalid, err)
		}
		for {
			var more any
			err := dec.Decode(&more)
			if err == io.EOF {
				break
			}
			if err != nil || more != nil {
				return PRD{}, fmt.Errorf("%w: bad YAML: more than one document", ErrInvalid)
			}
		}
	}
	if err := p.Validate(); err != nil {
		return PRD{}, err
	}
	return p, nil
}

func taskLabel(i int, id string) string {
	if id != "" {
		return fmt.Sprintf("task %q", id)
	}
	return fmt.Sprintf("task %d", i+1)
}

// locateJSON finds the task a strict decoding error of data comes from, so
// that the error names the task as well as the field; nil when the error is
// not inside a task.
func locateJSON(data []byte) error {
	var loose struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if json.Unmarshal(data, &loose) != nil {
		return nil
	}
	for i, raw := range loose.Tasks {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var t Task
		if err := dec.Decode(&t); err != nil {
			var id struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(raw, &id)
			return fmt.Errorf("%w: %s: bad JSON: %v", ErrInvalid, taskLabel(i, id.ID), err)
		}
	}
	return nil
}

// yamlTaskFields are the keys a task may have in YAML.
var yamlTaskFields = func() map[string]bool {
	m := map[string]bool{}
	rt := reflect.TypeOf(Task{})
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("yaml"), ",")
		m[name] = true
	}
	return m
}()

// locateYAML is locateJSON for YAML: it decodes each field of each task on
// its own so that the error names the task, the field and the line.
func locateYAML(data []byte) error {
	var loose struct {
		Tasks []yaml.Node `yaml:"tasks"`
	}
	if yaml.Unmarshal(data, &loose) != nil {
		return nil
	}
	for i := range loose.Tasks {
		n := &loose.Tasks[i]
		if n.Kind != yaml.MappingNode {
			continue
		}
		id := ""
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == "id" && n.Content[j+1].Kind == yaml.ScalarNode {
				id = n.Content[j+1].Value
			}
		}
		where := taskLabel(i, id)
		for j := 0; j+1 < len(n.Content); j += 2 {
			k, v := n.Content[j], n.Content[j+1]
			if k.Tag == "!!merge" {
				continue
			}
			if !yamlTaskFields[k.Value] {
				return fmt.Errorf("%w: %s: field %s: unknown field (line %d)", ErrInvalid, where, k.Value, k.Line)
			}
			one := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{k, v}}
			var t Task
			if err := one.Decode(&t); err != nil {
				return fmt.Errorf("%w: %s: field %s: %v", ErrInvalid, where, k.Value, err)
			}
		}
	}
	return nil
}

// Validate checks ids, required fields, dependencies and cycles.
func (p PRD) Validate() error {
	if len(p.Tasks) == 0 {
		return fmt.Errorf("%w: field tasks: at least one task is required", ErrInvalid)
	}
	seen := make(map[string]int, len(p.Tasks))
	for i, t := range p.Tasks {
		where := fmt.Sprintf("task %d", i+1)
		if t.ID != "" {
			where = fmt.Sprintf("task %q", t.ID)
		}
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
