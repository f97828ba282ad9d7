package prd_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/prd"
)

// ralphJSON is a prd.json as Ralph loops write it, with fields Ralph mesh
// does not know (at the top, in a story, nested).
const ralphJSON = `{
  "project": "Todo app",
  "branchName": "ralph/todo-api",
  "description": "A small todo service",
  "owner": {"team": "core", "tags": ["a", "b"]},
  "userStories": [
    {
      "id": "US-001",
      "title": "List todos",
      "description": "GET /todos",
      "acceptanceCriteria": ["GET /todos returns 200", "Typecheck passes"],
      "priority": 2,
      "passes": false,
      "notes": "Use the existing router."
    },
    {
      "id": "US-002",
      "title": "Create the store",
      "acceptanceCriteria": ["store.go exists"],
      "priority": 1,
      "passes": true,
      "notes": ""
    },
    {
      "id": "US-003",
      "title": "Create todos",
      "acceptanceCriteria": ["POST /todos returns 201"],
      "priority": 2,
      "passes": false,
      "dependencies": ["US-002", "US-001"],
      "estimate": "2h"
    },
    {
      "id": "US-004",
      "title": "Health check",
      "acceptanceCriteria": ["GET /healthz returns 200"],
      "priority": 1,
      "passes": false
    }
  ]
}
`

func TestRalphPRDRunsByPriorityAndSkipsWhatPasses(t *testing.T) {
	f, err := prd.ParseFile([]byte(ralphJSON), ".json")
	if err != nil {
		t.Fatal(err)
	}
	if f.Format != prd.FormatRalph || f.Title != "Todo app" || f.Branch != "ralph/todo-api" {
		t.Errorf("format %q, title %q, branch %q", f.Format, f.Title, f.Branch)
	}
	var ids []string
	for _, task := range f.Tasks {
		ids = append(ids, task.ID)
	}
	// Priority 1 first (US-002 passes, so US-004), then priority 2 in file
	// order.
	if want := []string{"US-004", "US-001", "US-003"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("run order %v, want %v", ids, want)
	}
	if len(f.Skipped) != 1 || f.Skipped[0].ID != "US-002" {
		t.Errorf("skipped %+v, want US-002", f.Skipped)
	}
	us1, us3 := f.Tasks[1], f.Tasks[2]
	if us1.Description != "GET /todos\n\nNotes: Use the existing router." || len(us1.AcceptanceCriteria) != 2 {
		t.Errorf("US-001 %+v", us1)
	}
	// A dependency on a story that passes holds already.
	if !reflect.DeepEqual(us3.DependsOn, []string{"US-001"}) {
		t.Errorf("US-003 depends on %v, want [US-001]", us3.DependsOn)
	}
	if f.Priority["US-004"] != 1 || f.Priority["US-003"] != 2 {
		t.Errorf("priorities %v", f.Priority)
	}
	p, err := prd.Parse([]byte(ralphJSON), ".json")
	if err != nil || !reflect.DeepEqual(p, f.PRD) {
		t.Errorf("Parse = %+v, %v", p, err)
	}
}

func TestRalphPRDWhoseStoriesAllPass(t *testing.T) {
	all := strings.ReplaceAll(ralphJSON, `"passes": false`, `"passes": true`)
	f, err := prd.ParseFile([]byte(all), ".json")
	if err != nil || len(f.Tasks) != 0 || len(f.Skipped) != 4 {
		t.Fatalf("ParseFile = %d tasks, %d skipped, %v; want 0, 4, nil", len(f.Tasks), len(f.Skipped), err)
	}
	if _, err := prd.Parse([]byte(all), ".json"); !errors.Is(err, prd.ErrNothingToRun) || !errors.Is(err, prd.ErrInvalid) {
		t.Errorf("Parse = %v, want ErrNothingToRun", err)
	}
}

func TestRunOrderFollowsDependencies(t *testing.T) {
	p := prd.PRD{Tasks: []prd.Task{
		{ID: "A", DependsOn: []string{"C"}}, {ID: "B"}, {ID: "C"}, {ID: "D", DependsOn: []string{"A"}},
	}}
	var ids []string
	for _, task := range p.RunOrder() {
		ids = append(ids, task.ID)
	}
	if want := []string{"B", "C", "A", "D"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("run order %v, want %v", ids, want)
	}
}

func TestSetPassesChangesOnlyThatValue(t *testing.T) {
	got, err := prd.SetPasses([]byte(ralphJSON), "US-001")
	if err != nil {
		t.Fatal(err)
	}
	// The first "passes": false is US-001's; everything else, the unknown
	// fields and the formatting included, stays byte for byte.
	want := strings.Replace(ralphJSON, `"passes": false`, `"passes": true`, 1)
	if string(got) != want {
		t.Errorf("SetPasses:\n%s\nwant:\n%s", got, want)
	}
	f, err := prd.ParseFile(got, ".json")
	if err != nil || len(f.Skipped) != 2 {
		t.Errorf("after SetPasses: %+v, %v", f.Skipped, err)
	}
	// US-004 has no passes: it gets one after its last field.
	got, err = prd.SetPasses([]byte(ralphJSON), "US-004")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `"acceptanceCriteria": ["GET /healthz returns 200"],
      "priority": 1,
      "passes": true
    }`) {
		t.Errorf("US-004 not marked:\n%s", got)
	}
	noPasses := `{"userStories": [{"id": "A", "title": "a", "acceptanceCriteria": ["x"]}], "extra": 1}`
	got, err = prd.SetPasses([]byte(noPasses), "A")
	if err != nil || string(got) != `{"userStories": [{"id": "A", "title": "a", "acceptanceCriteria": ["x"], "passes": true}], "extra": 1}` {
		t.Errorf("inserted passes: %s, %v", got, err)
	}
	if _, err := prd.SetPasses([]byte(ralphJSON), "US-999"); !errors.Is(err, prd.ErrNoStory) {
		t.Errorf("unknown story: %v", err)
	}
	if _, err := prd.SetPasses([]byte(`{"userStories": [`), "US-001"); !errors.Is(err, prd.ErrInvalid) {
		t.Errorf("broken file: %v", err)
	}
}

func TestRalphPRDErrorsNameTheStoryAndField(t *testing.T) {
	story := func(fields string) string {
		return "{\n  \"project\": \"p\",\n  \"userStories\": [\n    {\"id\": \"US-1\", \"title\": \"one\", \"acceptanceCriteria\": [\"c\"]},\n    " + fields + "\n  ]\n}\n"
	}
	cases := []struct {
		name, data, want string
	}{
		{"bad branch", `{"branchName": "-x", "userStories": []}`, `line 1, column 2: field branchName: branch name "-x"`},
		{"no stories", `{"project": "p", "userStories": []}`, `line 1, column 18: field userStories: at least one story is required`},
		{"missing title", story(`{"id": "US-2", "acceptanceCriteria": ["c"]}`), `line 5, column 5: story "US-2": field title: required`},
		{"empty criterion", story(`{"id": "US-2", "title": "two", "acceptanceCriteria": ["c", " "]}`),
			`line 5, column 64: story "US-2": field acceptanceCriteria[1]: empty criterion`},
		{"no criteria", story(`{"id": "US-2", "title": "two", "acceptanceCriteria": []}`),
			`line 5, column 36: story "US-2": field acceptanceCriteria: at least one criterion is required`},
		{"priority not a number", story(`{"id": "US-2", "title": "two", "acceptanceCriteria": ["c"], "priority": "high"}`),
			`line 5, column 77: story "US-2": field priority: bad JSON: a string where a number is expected`},
		{"passes not a bool", story(`{"id": "US-2", "title": "two", "acceptanceCriteria": ["c"], "passes": "no"}`),
			`line 5, column 75: story "US-2": field passes: bad JSON: a string where true or false is expected`},
		{"bad id", story(`{"id": "US 2", "title": "two", "acceptanceCriteria": ["c"]}`), `line 5, column 6: story "US 2": field id:`},
		{"duplicate id", story(`{"id": "US-1", "title": "two", "acceptanceCriteria": ["c"]}`), `line 5, column 6: story "US-1": field id: duplicate story id`},
		{"unknown dependency", story(`{"id": "US-2", "title": "two", "acceptanceCriteria": ["c"], "dependencies": ["US-9"]}`),
			`line 5, column 82: story "US-2": field dependencies[0]: unknown story "US-9"`},
		{"syntax", story(`{"id": "US-2",, }`), `line 5, column 19: bad JSON`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := prd.ParseFile([]byte(c.data), ".json")
			var de *prd.DecodeError
			if !errors.As(err, &de) || !errors.Is(err, prd.ErrInvalid) {
				t.Fatalf("error %v, want a *DecodeError", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want it to contain %q", err, c.want)
			}
		})
	}
}
