package prd_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/prd"
)

const validYAML = `title: Todo app
tasks:
  - id: setup
    title: Set up the project
    description: Create the module.
    acceptance_criteria:
      - go build ./... succeeds
    verify: go build ./...
  - id: api.v1
    title: Add the API
    acceptance_criteria:
      - GET /todos returns 200
      - POST /todos creates a todo
    depends_on: [setup]
`

const validJSON = `{
  "title": "Todo app",
  "tasks": [
    {"id": "setup", "title": "Set up the project", "description": "Create the module.",
     "acceptance_criteria": ["go build ./... succeeds"], "verify": "go build ./..."},
    {"id": "api.v1", "title": "Add the API",
     "acceptance_criteria": ["GET /todos returns 200", "POST /todos creates a todo"],
     "depends_on": ["setup"]}
  ]
}`

var wantValid = prd.PRD{
	Title: "Todo app",
	Tasks: []prd.Task{
		{
			ID: "setup", Title: "Set up the project", Description: "Create the module.",
			AcceptanceCriteria: []string{"go build ./... succeeds"}, Verify: "go build ./...",
		},
		{
			ID: "api.v1", Title: "Add the API",
			AcceptanceCriteria: []string{"GET /todos returns 200", "POST /todos creates a todo"},
			DependsOn:          []string{"setup"},
		},
	},
}

func TestParseValid(t *testing.T) {
	cases := []struct {
		name, ext, data string
	}{
		{"yaml", ".yaml", validYAML},
		{"yml", ".yml", validYAML},
		{"no extension is YAML", "", validYAML},
		{"json", ".json", validJSON},
		{"JSON upper-case extension", ".JSON", validJSON},
		// JSON is YAML, so a .yaml file may hold JSON.
		{"json in a yaml file", ".yaml", validJSON},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := prd.Parse([]byte(c.data), c.ext)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, wantValid) {
				t.Errorf("Parse = %+v\nwant %+v", got, wantValid)
			}
		})
	}
}

func TestParseValidEdgeCases(t *testing.T) {
	cases := []struct {
		name, ext, data string
	}{
		{"single task without title of the PRD", ".yaml", "tasks:\n  - id: A\n    title: t\n    acceptance_criteria: [c]\n"},
		{"id with every allowed character", ".yaml", "tasks:\n  - id: a-Z_0.9\n    title: t\n    acceptance_criteria: [c]\n"},
		{"id of 64 characters", ".yaml", "tasks:\n  - id: " + strings.Repeat("a", 64) + "\n    title: t\n    acceptance_criteria: [c]\n"},
		{"diamond dependencies", ".json", `{"tasks":[
			{"id":"A","title":"t","acceptance_criteria":["c"]},
			{"id":"B","title":"t","acceptance_criteria":["c"],"depends_on":["A"]},
			{"id":"C","title":"t","acceptance_criteria":["c"],"depends_on":["A"]},
			{"id":"D","title":"t","acceptance_criteria":["c"],"depends_on":["B","C"]}]}`},
		{"dependency on a later task", ".yaml", "tasks:\n  - id: A\n    title: t\n    acceptance_criteria: [c]\n    depends_on: [B]\n  - id: B\n    title: t\n    acceptance_criteria: [c]\n"},
		{"parent_id of a subtask", ".json", `{"tasks":[{"id":"A.1","title":"t","acceptance_criteria":["c"],"parent_id":"A"}]}`},
		{"trailing empty YAML document", ".yaml", "tasks:\n  - id: A\n    title: t\n    acceptance_criteria: [c]\n---\n"},
		{"trailing JSON whitespace", ".json", `{"tasks":[{"id":"A","title":"t","acceptance_criteria":["c"]}]}` + "\n\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := prd.Parse([]byte(c.data), c.ext); err != nil {
				t.Fatalf("Parse: %v", err)
			}
		})
	}
}

// yamlPRD is a YAML PRD of the given tasks (see yamlTask).
func yamlPRD(tasks ...string) string {
	return "tasks:\n" + strings.Join(tasks, "")
}

// yamlTask renders one YAML list item; id and criteria are left out when
// empty, extra lines are added as they are.
func yamlTask(id, title string, criteria string, extra ...string) string {
	var b strings.Builder
	b.WriteString("  - ")
	if id != "" {
		b.WriteString("id: " + id + "\n    ")
	}
	b.WriteString("title: " + title + "\n")
	if criteria != "" {
		b.WriteString("    acceptance_criteria: " + criteria + "\n")
	}
	for _, e := range extra {
		b.WriteString("    " + e + "\n")
	}
	return b.String()
}

func TestParseInvalid(t *testing.T) {
	cases := []struct {
		name, ext, data string
		// want are substrings of the error: the task and the field.
		want []string
	}{
		{"empty tasks", ".yaml", "title: x\ntasks: []\n", []string{"field tasks", "at least one task"}},
		{"no tasks key", ".yaml", "title: x\n", []string{"field tasks"}},
		{"empty JSON tasks", ".json", `{"tasks":[]}`, []string{"field tasks"}},
		{"missing id", ".yaml", yamlPRD(yamlTask("A", "t", "[c]"), yamlTask("", "t", "[c]")),
			[]string{"task 2", "field id", "required"}},
		{"missing id (JSON)", ".json", `{"tasks":[{"title":"t","acceptance_criteria":["c"]}]}`,
			[]string{"task 1", "field id", "required"}},
		{"missing title", ".yaml", yamlPRD(yamlTask("A", `""`, "[c]")), []string{`task "A"`, "field title", "required"}},
		{"blank title", ".json", `{"tasks":[{"id":"A","title":"  ","acceptance_criteria":["c"]}]}`,
			[]string{`task "A"`, "field title"}},
		{"missing acceptance_criteria", ".yaml", yamlPRD(yamlTask("A", "t", "")),
			[]string{`task "A"`, "field acceptance_criteria", "at least one"}},
		{"empty acceptance_criteria", ".json", `{"tasks":[{"id":"A","title":"t","acceptance_criteria":[]}]}`,
			[]string{`task "A"`, "field acceptance_criteria"}},
		{"missing id and criteria", ".json", `{"tasks":[{"id":"A","title":"t","acceptance_criteria":["c"]},{"id":"","title":"t"}]}`,
			[]string{"task 2", "field id"}},
		{"empty criterion", ".yaml", yamlPRD(yamlTask("A", "t", `[ok, "  "]`)),
			[]string{`task "A"`, "field acceptance_criteria[1]", "empty criterion"}},
		{"bad id: space", ".yaml", yamlPRD(yamlTask(`"a b"`, "t", "[c]")), []string{`task "a b"`, "field id"}},
		{"bad id: slash", ".json", `{"tasks":[{"id":"a/b","title":"t","acceptance_criteria":["c"]}]}`,
			[]string{`task "a/b"`, "field id"}},
		{"bad id: wildcard", ".json", `{"tasks":[{"id":"a*","title":"t","acceptance_criteria":["c"]}]}`,
			[]string{`task "a*"`, "field id"}},
		{"bad id: leading dash", ".json", `{"tasks":[{"id":"-a","title":"t","acceptance_criteria":["c"]}]}`,
			[]string{`task "-a"`, "field id"}},
		{"bad id: too long", ".json", `{"tasks":[{"id":"` + strings.Repeat("a", 65) + `","title":"t","acceptance_criteria":["c"]}]}`,
			[]string{"field id", "1-64"}},
		{"duplicate ids", ".yaml", yamlPRD(yamlTask("A", "t", "[c]"), yamlTask("B", "t", "[c]"), yamlTask("A", "t2", "[c]")),
			[]string{`task "A"`, "field id", "duplicate"}},
		{"unknown depends_on", ".yaml", yamlPRD(yamlTask("A", "t", "[c]"), yamlTask("B", "t", "[c]", "depends_on: [A, Z]")),
			[]string{`task "B"`, "field depends_on", `unknown task "Z"`}},
		{"self dependency", ".json", `{"tasks":[{"id":"A","title":"t","acceptance_criteria":["c"],"depends_on":["A"]}]}`,
			[]string{`task "A"`, "field depends_on", "itself"}},
		{"cycle", ".yaml", yamlPRD(yamlTask("A", "t", "[c]", "depends_on: [B]"), yamlTask("B", "t", "[c]", "depends_on: [A]")),
			[]string{"field depends_on", "cycle", "A -> B -> A"}},
		{"cycle of three", ".json", `{"tasks":[
			{"id":"A","title":"t","acceptance_criteria":["c"],"depends_on":["C"]},
			{"id":"B","title":"t","acceptance_criteria":["c"],"depends_on":["A"]},
			{"id":"C","title":"t","acceptance_criteria":["c"],"depends_on":["B"]}]}`,
			[]string{"field depends_on", "A -> C -> B -> A"}},
		{"unknown field: YAML typo", ".yaml", yamlPRD(yamlTask("A", "t", "[c]"), "  - id: B\n    title: t\n    acceptence_criteria: [c]\n"),
			[]string{`task "B"`, "acceptence_criteria", "line 7"}},
		{"unknown field: YAML typo without id", ".yaml", yamlPRD("  - titel: t\n"),
			[]string{"task 1", "titel"}},
		{"unknown field: JSON", ".json", `{"tasks":[{"id":"A","title":"t","acceptance_criteria":["c"]},{"id":"B","title":"t","acceptance_criteria":["c"],"priority":1}]}`,
			[]string{`task "B"`, "field priority", "unknown field"}},
		{"unknown field: JSON typo", ".json", `{"tasks":[{"id":"A","title":"t","acceptence_criteria":["c"]}]}`,
			[]string{`task "A"`, "acceptence_criteria"}},
		{"unknown top-level field: YAML", ".yaml", "titel: x\n" + yamlPRD(yamlTask("A", "t", "[c]")), []string{"titel"}},
		{"unknown top-level field: JSON", ".json", `{"titel":"x","tasks":[{"id":"A","title":"t","acceptance_criteria":["c"]}]}`,
			[]string{"field titel", "unknown field"}},
		{"wrong type: YAML criteria", ".yaml", yamlPRD(yamlTask("A", "t", "{a: b}")),
			[]string{`task "A"`, "field acceptance_criteria"}},
		{"wrong type: JSON criteria", ".json", `{"tasks":[{"id":"A","title":"t","acceptance_criteria":"c"}]}`,
			[]string{`task "A"`, "acceptance_criteria"}},
		{"malformed YAML", ".yaml", "tasks:\n  - id: A\n    title: [unclosed\n", []string{"bad YAML"}},
		{"malformed YAML indentation", ".yaml", "tasks:\n- id: A\n  title: t\n acceptance_criteria: [c]\n", []string{"bad YAML"}},
		{"tasks not a list", ".yaml", "tasks: A\n", []string{"bad YAML"}},
		{"empty YAML", ".yaml", "", []string{"bad YAML"}},
		{"second YAML document", ".yaml", yamlPRD(yamlTask("A", "t", "[c]")) + "---\n" + yamlPRD(yamlTask("B", "t", "[c]")),
			[]string{"bad YAML", "more than one document"}},
		{"malformed JSON", ".json", `{"tasks":[{"id":"A",}]}`, []string{"bad JSON"}},
		{"truncated JSON", ".json", `{"tasks":[`, []string{"bad JSON"}},
		{"YAML given as JSON", ".json", validYAML, []string{"bad JSON"}},
		{"empty JSON", ".json", ``, []string{"bad JSON"}},
		{"data after the JSON document", ".json", `{"tasks":[{"id":"A","title":"t","acceptance_criteria":["c"]}]} {"tasks":[]}`,
			[]string{"bad JSON", "after the document"}},
		{"stray closing brace after JSON", ".json", `{"tasks":[{"id":"A","title":"t","acceptance_criteria":["c"]}]}}`,
			[]string{"bad JSON"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := prd.Parse([]byte(c.data), c.ext)
			if err == nil {
				t.Fatalf("Parse accepted %+v", p)
			}
			if !errors.Is(err, prd.ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			if !reflect.DeepEqual(p, prd.PRD{}) {
				t.Errorf("Parse returned a PRD with the error: %+v", p)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := prd.Task{ID: "A", Title: "t", AcceptanceCriteria: []string{"c"}}
	with := func(f func(*prd.Task)) prd.Task {
		t := ok
		t.AcceptanceCriteria = append([]string(nil), ok.AcceptanceCriteria...)
		f(&t)
		return t
	}
	cases := []struct {
		name  string
		tasks []prd.Task
		want  []string // empty: valid
	}{
		{"valid", []prd.Task{ok}, nil},
		{"nil tasks", nil, []string{"field tasks"}},
		{"no id, named by index", []prd.Task{ok, with(func(t *prd.Task) { t.ID = "" })}, []string{"task 2", "field id"}},
		{"no title", []prd.Task{with(func(t *prd.Task) { t.Title = "" })}, []string{`task "A"`, "field title"}},
		{"nil criteria", []prd.Task{with(func(t *prd.Task) { t.AcceptanceCriteria = nil })}, []string{`task "A"`, "field acceptance_criteria"}},
		{"blank criterion", []prd.Task{with(func(t *prd.Task) { t.AcceptanceCriteria = append(t.AcceptanceCriteria, "\t") })},
			[]string{`task "A"`, "field acceptance_criteria[1]"}},
		{"id with dot and dash", []prd.Task{with(func(t *prd.Task) { t.ID = "a.b-c_d" })}, nil},
		{"id with unicode", []prd.Task{with(func(t *prd.Task) { t.ID = "tâche" })}, []string{`task "tâche"`, "field id"}},
		{"id with newline", []prd.Task{with(func(t *prd.Task) { t.ID = "a\nb" })}, []string{"field id"}},
		{"id with trailing newline", []prd.Task{with(func(t *prd.Task) { t.ID = "a\n" })}, []string{"field id"}},
		{"duplicate", []prd.Task{ok, with(func(t *prd.Task) { t.Title = "other" })}, []string{`task "A"`, "field id", "duplicate"}},
		{"unknown dependency", []prd.Task{with(func(t *prd.Task) { t.DependsOn = []string{"nope"} })},
			[]string{`task "A"`, "field depends_on", `"nope"`}},
		{"self dependency", []prd.Task{with(func(t *prd.Task) { t.DependsOn = []string{"A"} })},
			[]string{`task "A"`, "field depends_on", "itself"}},
		{"cycle reached from outside", []prd.Task{
			{ID: "X", Title: "t", AcceptanceCriteria: []string{"c"}, DependsOn: []string{"A"}},
			{ID: "A", Title: "t", AcceptanceCriteria: []string{"c"}, DependsOn: []string{"B"}},
			{ID: "B", Title: "t", AcceptanceCriteria: []string{"c"}, DependsOn: []string{"A"}},
		}, []string{"field depends_on", "cycle A -> B -> A"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := prd.PRD{Tasks: c.tasks}.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			if !errors.Is(err, prd.ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// The cycle names only the tasks on it, not the ones that lead into it.
func TestCycleOmitsTasksLeadingIn(t *testing.T) {
	p := prd.PRD{Tasks: []prd.Task{
		{ID: "X", Title: "t", AcceptanceCriteria: []string{"c"}, DependsOn: []string{"A"}},
		{ID: "A", Title: "t", AcceptanceCriteria: []string{"c"}, DependsOn: []string{"B"}},
		{ID: "B", Title: "t", AcceptanceCriteria: []string{"c"}, DependsOn: []string{"A"}},
	}}
	err := p.Validate()
	if err == nil {
		t.Fatal("cycle accepted")
	}
	if strings.Contains(err.Error(), "X") {
		t.Errorf("error %q names task X, which is not on the cycle", err)
	}
}

func TestTaskValidate(t *testing.T) {
	cases := []struct {
		task prd.Task
		want string // empty: valid
	}{
		{prd.Task{ID: "A", Title: "t", AcceptanceCriteria: []string{"c"}}, ""},
		{prd.Task{Title: "t", AcceptanceCriteria: []string{"c"}}, "field id"},
		{prd.Task{ID: "A", AcceptanceCriteria: []string{"c"}}, "field title"},
		{prd.Task{ID: "A", Title: "t"}, "field acceptance_criteria"},
		{prd.Task{ID: "A", Title: "t", AcceptanceCriteria: []string{""}}, "field acceptance_criteria[0]"},
		{prd.Task{ID: "a b", Title: "t", AcceptanceCriteria: []string{"c"}}, "field id"},
	}
	for _, c := range cases {
		err := c.task.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.task, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want one naming %q", c.task, err, c.want)
		}
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoad(t *testing.T) {
	for _, c := range []struct{ name, content string }{
		{"prd.yaml", validYAML},
		{"prd.yml", validYAML},
		{"prd.json", validJSON},
		{"PRD", validYAML},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := prd.Load(writeFile(t, c.name, c.content))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, wantValid) {
				t.Errorf("Load = %+v", got)
			}
		})
	}
}

func TestLoadTestdata(t *testing.T) {
	for _, name := range []string{"valid.yaml", "valid.json"} {
		got, err := prd.Load(filepath.Join("testdata", name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, wantValid) {
			t.Errorf("%s: Load = %+v", name, got)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nosuch.yaml")
	_, err := prd.Load(path)
	if err == nil {
		t.Fatal("Load of a missing file: want error")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the path", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %q does not wrap fs.ErrNotExist", err)
	}
	if errors.Is(err, prd.ErrInvalid) {
		t.Errorf("a missing file is not an invalid PRD: %q", err)
	}
}

func TestLoadBadFile(t *testing.T) {
	cases := []struct {
		name, content string
		want          []string
	}{
		{"cycle.yaml", yamlPRD(yamlTask("A", "t", "[c]", "depends_on: [B]"), yamlTask("B", "t", "[c]", "depends_on: [A]")),
			[]string{"A -> B -> A"}},
		{"typo.yaml", yamlPRD("  - id: A\n    title: t\n    acceptence_criteria: [c]\n"), []string{`task "A"`, "acceptence_criteria"}},
		{"typo.json", `{"tasks":[{"id":"A","title":"t","acceptence_criteria":["c"]}]}`, []string{`task "A"`, "acceptence_criteria"}},
		// A .json file is parsed as JSON only.
		{"yaml.json", validYAML, []string{"bad JSON"}},
		{"empty.yaml", "", []string{"bad YAML"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, c.name, c.content)
			_, err := prd.Load(path)
			if err == nil {
				t.Fatal("Load accepted it")
			}
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Errorf("error %q does not start with the path %s", err, path)
			}
			if !errors.Is(err, prd.ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestSameWork(t *testing.T) {
	a := prd.Task{ID: "T1", Title: "Write the  Parser", AcceptanceCriteria: []string{"parses x", "rejects y"}}
	cases := []struct {
		name string
		b    prd.Task
		want bool
	}{
		{"another id, other case and spacing", prd.Task{ID: "T1.1", Title: "write the parser", AcceptanceCriteria: []string{"Parses  x", "rejects y "}}, true},
		{"other title", prd.Task{Title: "Write the lexer", AcceptanceCriteria: []string{"parses x", "rejects y"}}, false},
		{"a criterion fewer", prd.Task{Title: "Write the parser", AcceptanceCriteria: []string{"parses x"}}, false},
		{"another criterion", prd.Task{Title: "Write the parser", AcceptanceCriteria: []string{"parses x", "rejects z"}}, false},
	}
	for _, c := range cases {
		if got := a.SameWork(c.b); got != c.want {
			t.Errorf("%s: SameWork = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestDecodeErrorPositions pins the line and column of every kind of
// decoding error to the character the problem is at, and the task and field
// where there is one.
func TestDecodeErrorPositions(t *testing.T) {
	cases := []struct {
		name, ext, data string
		line, col       int
		task, field     string
		msg             string // a substring of the message
	}{
		// The case: yaml.v3 put this on line 2, where the
		// sequence began, instead of line 5.
		{"YAML: indentation off by one", ".yaml",
			"title: Demo\ntasks:\n  - id: T1\n    title: x\n   acceptance_criteria: [y]\n",
			5, 4, "", "", "bad YAML: did not find expected '-' indicator (while parsing a block collection at line 3, column 3)"},
		{"YAML: key dedented out of its task", ".yaml",
			"tasks:\n- id: A\n  title: t\n acceptance_criteria: [c]\n",
			4, 2, "", "", "did not find expected key"},
		{"YAML: flow sequence never closed", ".yaml",
			"tasks:\n  - id: A\n    title: [unclosed\n",
			4, 1, "", "", "did not find expected ',' or ']' (while parsing a flow sequence at line 3, column 12)"},
		{"YAML: colon in a plain value", ".yaml",
			"tasks:\n  - id: A\n    title: a: b\n",
			3, 13, "", "", "mapping values are not allowed in this context"},
		{"YAML: tab indentation", ".yaml",
			"tasks:\n  - id: A\n\ttitle: x\n",
			3, 1, "", "", "found a tab character that violates indentation"},
		{"YAML: quoted value never closed", ".yaml",
			"tasks:\n  - id: A\n    title: \"abc\n",
			4, 1, "", "", "found unexpected end of stream"},
		{"YAML: unknown task field", ".yaml",
			yamlPRD(yamlTask("A", "t", "[c]"), "  - id: B\n    title: t\n    acceptence_criteria: [c]\n"),
			7, 5, `task "B"`, "acceptence_criteria", "unknown field"},
		{"YAML: unknown field of a task without id", ".yaml",
			"tasks:\n  - title: t\n    titel: u\n",
			3, 5, "task 1", "titel", "unknown field"},
		{"YAML: unknown top-level field", ".yaml",
			"title: x\ntitel: y\n" + yamlPRD(yamlTask("A", "t", "[c]")),
			2, 1, "", "titel", "unknown field"},
		{"YAML: criteria a map", ".yaml",
			yamlPRD(yamlTask("A", "t", "{a: b}")),
			4, 26, `task "A"`, "acceptance_criteria", "bad YAML: cannot construct !!map into []string"},
		{"YAML: second task a string", ".yaml",
			yamlPRD(yamlTask("A", "t", "[c]")) + "  - just a line\n",
			5, 5, "task 2", "", "bad YAML: cannot construct !!str"},
		{"YAML: tasks not a list", ".yaml", "title: x\ntasks: A\n",
			2, 8, "", "tasks", "bad YAML: cannot construct !!str `A`"},
		{"YAML: second document", ".yaml",
			yamlPRD(yamlTask("A", "t", "[c]")) + "---\n" + yamlPRD(yamlTask("B", "t", "[c]")),
			5, 1, "", "", "bad YAML: more than one document"},
		{"YAML: empty file", ".yaml", "", 0, 0, "", "", "bad YAML: no document"},
		{"YAML: only a comment", ".yaml", "# nothing yet\n", 0, 0, "", "", "bad YAML: no document"},

		{"JSON: trailing comma", ".json", `{"tasks":[{"id":"A",}]}`,
			1, 21, "", "", "bad JSON: invalid character '}' looking for beginning of object key string"},
		{"JSON: missing comma on line 3", ".json",
			"{\n  \"tasks\": [\n    {\"id\": \"A\" \"title\": \"t\"}\n  ]\n}",
			3, 16, "", "", "bad JSON: invalid character '\"' after object key:value pair"},
		{"JSON: columns count characters", ".json", `{"title":"café ☕","tasks":[}`,
			1, 28, "", "", "bad JSON: invalid character '}'"},
		{"JSON: truncated", ".json", "{\"tasks\":[\n\n",
			1, 11, "", "", "bad JSON: unexpected end of the file"},
		{"JSON: criteria a string", ".json",
			"{\n \"tasks\": [\n  {\"id\": \"A\", \"title\": \"t\", \"acceptance_criteria\": \"c\"}\n ]\n}",
			3, 52, `task "A"`, "acceptance_criteria", "bad JSON: a string where an array is expected"},
		{"JSON: criteria an object", ".json",
			`{"tasks":[{"id":"A","title":"t","acceptance_criteria":{"a":1}}]}`,
			1, 55, `task "A"`, "acceptance_criteria", "bad JSON: an object where an array is expected"},
		{"JSON: one criterion a number", ".json",
			`{"tasks":[{"id":"A","title":"t","acceptance_criteria":["c", 12]}]}`,
			1, 61, `task "A"`, "acceptance_criteria[1]", "bad JSON: a number where a string is expected"},
		{"JSON: id a number", ".json", `{"tasks":[{"id":7,"title":"t","acceptance_criteria":["c"]}]}`,
			1, 17, "task 1", "id", "bad JSON: a number where a string is expected"},
		{"JSON: tasks an object", ".json", `{"tasks":{"id":"A"}}`,
			1, 10, "", "tasks", "bad JSON: an object where an array is expected"},
		{"JSON: not an object", ".json", `[1]`, 1, 1, "", "", "bad JSON: an array where an object is expected"},
		{"JSON: unknown task field", ".json",
			"{\"tasks\": [\n  {\"id\": \"A\", \"title\": \"t\", \"acceptance_criteria\": [\"c\"]},\n  {\"id\": \"B\", \"title\": \"t\", \"priority\": 1}\n]}",
			3, 29, `task "B"`, "priority", "unknown field"},
		{"JSON: unknown top-level field", ".json", `{"title":"x", "titel":"y","tasks":[]}`,
			1, 15, "", "titel", "unknown field"},
		{"JSON: data after the document", ".json", "{\"tasks\":[{\"id\":\"A\",\"title\":\"t\",\"acceptance_criteria\":[\"c\"]}]}\n  {}",
			2, 3, "", "", "bad JSON: data after the document"},
		{"JSON: empty file", ".json", " \n", 0, 0, "", "", "bad JSON: no document"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := prd.Parse([]byte(c.data), c.ext)
			var de *prd.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a *prd.DecodeError", err, err)
			}
			if de.Line != c.line || de.Column != c.col || de.Task != c.task || de.Field != c.field || !strings.Contains(de.Msg, c.msg) {
				t.Errorf("got line %d, column %d, task %q, field %q, msg %q\nwant line %d, column %d, task %q, field %q, msg containing %q",
					de.Line, de.Column, de.Task, de.Field, de.Msg, c.line, c.col, c.task, c.field, c.msg)
			}
			if !errors.Is(err, prd.ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			if c.line > 0 && !strings.Contains(err.Error(), fmt.Sprintf("line %d, column %d: ", c.line, c.col)) {
				t.Errorf("error %q does not say where", err)
			}
		})
	}
}

// Load names the file before the position, as an editor expects.
func TestLoadNamesFileAndPosition(t *testing.T) {
	path := writeFile(t, "prd.yaml", "title: Demo\ntasks:\n  - id: T1\n    title: x\n   acceptance_criteria: [y]\n")
	_, err := prd.Load(path)
	want := path + ": invalid PRD: line 5, column 4: bad YAML: did not find expected '-' indicator"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %v\nwant it to start with %q", err, want)
	}
}
