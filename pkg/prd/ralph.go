package prd

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/ralphmesh/ralph/pkg/gitref"
)

// The formats a PRD file can be in.
const (
	FormatYAML = "yaml"
	FormatJSON = "json"
	// FormatRalph is the prd.json of the popular Ralph loops: project,
	// branchName, description and userStories with id, title,
	// description, acceptanceCriteria, priority, passes, notes and
	// dependencies. Accepted as it is: fields Ralph mesh does not know
	// are kept, and passes is written back when a story is approved.
	FormatRalph = "prd.json"
)

// File is a PRD as its file gives it: the tasks to run, in the order they
// are tried, and what the file says besides.
type File struct {
	PRD
	Format string
	// Skipped are the stories of a prd.json that already pass, which are
	// not run, in file order.
	Skipped []Task
	// Priority is each story's priority in a prd.json, by id (a story
	// without one has none here).
	Priority map[string]int
}

// ErrNothingToRun: every story of a prd.json passes already.
var ErrNothingToRun = fmt.Errorf("%w: every story passes already; nothing to run", ErrInvalid)

// isRalph reports whether a JSON document is a Ralph prd.json: an object
// with userStories and no tasks.
func isRalph(data []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return false
	}
	_, stories := top["userStories"]
	_, tasks := top["tasks"]
	return stories && !tasks
}

// ralphDoc is the part of a prd.json Ralph mesh reads; everything else is
// left in the file as it is.
type ralphDoc struct {
	Project     string       `json:"project"`
	BranchName  string       `json:"branchName"`
	Description string       `json:"description"`
	UserStories []ralphStory `json:"userStories"`
}

type ralphStory struct {
	ID                 string   `json:"id"`
	Title              string   `json:"title"`
	Description        string   `json:"description"`
	AcceptanceCriteria []string `json:"acceptanceCriteria"`
	Priority           *int     `json:"priority"`
	Passes             bool     `json:"passes"`
	Notes              string   `json:"notes"`
	Dependencies       []string `json:"dependencies"`
}

func storyLabel(i int, id string) string {
	if id != "" {
		return fmt.Sprintf("story %q", id)
	}
	return fmt.Sprintf("story %d", i+1)
}

// decodeRalph reads a prd.json. Its errors are *DecodeError with the line
// and column of the story's field (or of the story when the field is
// missing), naming the story and the field by their prd.json names.
func decodeRalph(data []byte) (File, error) {
	var doc ralphDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return File{}, jsonError(data, err)
	}
	spots := indexJSON(data)
	at := func(path []string, msg string, a ...any) error {
		e := &DecodeError{Msg: fmt.Sprintf(msg, a...)}
		// The deepest spot on the path that exists: the field, else the
		// story holding it.
		for n := len(path); n > 0 && e.Line == 0; n-- {
			for _, s := range spots {
				if slices.Equal(s.path, path[:n]) {
					off := s.start
					if s.key >= 0 {
						off = s.key
					}
					e.Line, e.Column = position(data, off)
					break
				}
			}
		}
		e.Task, e.Field = jsonLabel(spots, path)
		return e
	}
	if doc.BranchName != "" {
		if err := gitref.ValidBranch(doc.BranchName); err != nil {
			return File{}, at([]string{"branchName"}, "%v", err)
		}
	}
	if len(doc.UserStories) == 0 {
		return File{}, at([]string{"userStories"}, "at least one story is required")
	}
	f := File{Format: FormatRalph, Priority: map[string]int{}}
	f.Title, f.Branch = doc.Project, doc.BranchName
	seen := map[string]bool{}
	passes := map[string]bool{}
	for i, s := range doc.UserStories {
		path := func(field string) []string { return []string{"userStories", strconv.Itoa(i), field} }
		if err := s.task().Validate(); err != nil {
			field, index, msg := ralphField(err)
			p := path(field)
			if index != "" {
				p = append(p, index)
			}
			return File{}, at(p, "%s", msg)
		}
		if seen[s.ID] {
			return File{}, at(path("id"), "duplicate story id")
		}
		seen[s.ID] = true
		passes[s.ID] = s.Passes
		if s.Priority != nil {
			f.Priority[s.ID] = *s.Priority
		}
	}
	for i, s := range doc.UserStories {
		for j, d := range s.Dependencies {
			where := []string{"userStories", strconv.Itoa(i), "dependencies", strconv.Itoa(j)}
			switch {
			case !seen[d]:
				return File{}, at(where, "unknown story %q", d)
			case d == s.ID:
				return File{}, at(where, "a story cannot depend on itself")
			}
		}
	}
	// Priority order (1 first, the Ralph convention), ties and stories
	// without a priority in file order, the latter last.
	order := make([]int, len(doc.UserStories))
	for i := range order {
		order[i] = i
	}
	prio := func(i int) int {
		if p := doc.UserStories[i].Priority; p != nil {
			return *p
		}
		return math.MaxInt
	}
	slices.SortStableFunc(order, func(a, b int) int { return prio(a) - prio(b) })
	for _, i := range order {
		s := doc.UserStories[i]
		t := s.task()
		if s.Passes {
			f.Skipped = append(f.Skipped, t)
			continue
		}
		// A story that passes is done: depending on it holds already.
		t.DependsOn = slices.DeleteFunc(t.DependsOn, func(d string) bool { return passes[d] })
		f.Tasks = append(f.Tasks, t)
	}
	slices.SortStableFunc(f.Skipped, func(a, b Task) int { return index(doc, a.ID) - index(doc, b.ID) })
	if len(f.Tasks) > 0 {
		if err := f.PRD.Validate(); err != nil {
			return File{}, fmt.Errorf("%w (in the stories' dependencies)", err)
		}
	}
	return f, nil
}

func index(doc ralphDoc, id string) int {
	return slices.IndexFunc(doc.UserStories, func(s ralphStory) bool { return s.ID == id })
}

// task is the story as a task: its notes go with its description.
func (s ralphStory) task() Task {
	t := Task{ID: s.ID, Title: s.Title, Description: s.Description, AcceptanceCriteria: s.AcceptanceCriteria,
		DependsOn: slices.Clone(s.Dependencies)}
	if n := strings.TrimSpace(s.Notes); n != "" {
		t.Description = strings.TrimSpace(t.Description + "\n\nNotes: " + n)
	}
	return t
}

// ralphField splits a Task.Validate error ("field acceptance_criteria[2]:
// empty criterion") into the prd.json name of the field
// (acceptanceCriteria), the index in it ("2", or "") and the message.
func ralphField(err error) (field, index, msg string) {
	name, msg, ok := strings.Cut(strings.TrimPrefix(err.Error(), "field "), ": ")
	if !ok {
		return "", "", err.Error()
	}
	field, index, _ = strings.Cut(name, "[")
	index = strings.TrimSuffix(index, "]")
	switch field {
	case "acceptance_criteria":
		field = "acceptanceCriteria"
	case "depends_on":
		field = "dependencies"
	}
	return field, index, msg
}

// ErrNoStory: SetPasses was asked for a story the file does not have.
var ErrNoStory = errors.New("no such story")

// SetPasses returns the prd.json data with story id's passes set to true
// and every other byte as it was: the order of keys, fields Ralph mesh
// does not know, the formatting. A story without passes gets one after its
// last field.
func SetPasses(data []byte, id string) ([]byte, error) {
	if !json.Valid(data) {
		return nil, fmt.Errorf("%w: set passes of story %q: the file is not valid JSON any more", ErrInvalid, id)
	}
	spots := indexJSON(data)
	story := ""
	for _, s := range spots {
		if len(s.path) == 3 && s.path[0] == "userStories" && s.path[2] == "id" && s.scalar && s.str == id {
			story = s.path[1]
			break
		}
	}
	if story == "" {
		return nil, fmt.Errorf("set passes: %w: %q is not in the file's userStories", ErrNoStory, id)
	}
	var obj, last *jsonSpot
	for i := range spots {
		s := &spots[i]
		switch {
		case len(s.path) == 2 && s.path[0] == "userStories" && s.path[1] == story:
			obj = s
		case len(s.path) == 3 && s.path[0] == "userStories" && s.path[1] == story:
			if s.path[2] == "passes" {
				return slices.Concat(data[:s.start], []byte("true"), data[s.end:]), nil
			}
			last = s
		}
	}
	if obj == nil || last == nil || data[obj.start] != '{' {
		return nil, fmt.Errorf("%w: set passes: story %q is not an object", ErrInvalid, id)
	}
	return slices.Concat(data[:last.end], []byte(`, "passes": true`), data[last.end:]), nil
}

// RunOrder is the order the session takes the tasks in: each time the
// first task, in file order, whose dependencies are all done.
func (p PRD) RunOrder() []Task {
	done := map[string]bool{}
	var order []Task
	for len(order) < len(p.Tasks) {
		next := slices.IndexFunc(p.Tasks, func(t Task) bool {
			return !done[t.ID] && !slices.ContainsFunc(t.DependsOn, func(d string) bool { return !done[d] })
		})
		if next < 0 {
			break // a cycle: Validate refuses it
		}
		done[p.Tasks[next].ID] = true
		order = append(order, p.Tasks[next])
	}
	return order
}
