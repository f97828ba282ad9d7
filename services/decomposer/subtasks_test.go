package decomposer

import (
	"errors"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/prd"
)

var parent = prd.Task{ID: "T2", Title: "Build the report", AcceptanceCriteria: []string{"report.md lists every profile"}}

func TestParse(t *testing.T) {
	good := `{"subtasks": [
	  {"id": "a", "title": "Collect the profiles", "description": "list them", "acceptance_criteria": ["profiles.txt has one line per profile"]},
	  {"id": "b", "title": "Write the report", "description": "", "acceptance_criteria": ["report.md lists every profile"], "depends_on": ["a"]}]}`
	subs, err := Parse(good, parent, 4, []string{"T1", "T2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 2 || subs[0].ID != "T2.1" || subs[1].ID != "T2.2" {
		t.Fatalf("ids %+v", subs)
	}
	if subs[1].DependsOn[0] != "T2.1" || subs[0].ParentID != "T2" || subs[1].ParentID != "T2" {
		t.Fatalf("links %+v", subs)
	}
	// A fenced reply is the same reply.
	if _, err := Parse("```json\n"+good+"\n```", parent, 4, nil); err != nil {
		t.Fatalf("fenced: %v", err)
	}
	// An id the session has is skipped.
	subs, err = Parse(good, parent, 4, []string{"T2.1"})
	if err != nil || subs[0].ID != "T2.1b" || subs[1].ID != "T2.2" {
		t.Fatalf("taken id: %v %+v", err, subs)
	}
}

func TestParseRejects(t *testing.T) {
	item := func(id, title string) string {
		return `{"id": "` + id + `", "title": "` + title + `", "description": "", "acceptance_criteria": ["c ` + id + `"]}`
	}
	cases := []struct {
		name, reply, want string
	}{
		{"prose", "Sure! Here are the subtasks: 1. collect 2. write", "not JSON"},
		{"truncated", `{"subtasks": [` + item("a", "x"), "not JSON"},
		{"a bare array", `[` + item("a", "x") + `,` + item("b", "y") + `]`, "does not match the schema"},
		{"one subtask", `{"subtasks": [` + item("a", "x") + `]}`, "does not match the schema: at /subtasks"},
		{"too many", `{"subtasks": [` + item("a", "x") + `,` + item("b", "y") + `,` + item("c", "z") + `]}`, "3 subtasks, want 2 to 2"},
		{"missing criteria", `{"subtasks": [{"id": "a", "title": "x", "description": ""},` + item("b", "y") + `]}`, "at /subtasks/0"},
		{"unknown field", `{"subtasks": [` + item("a", "x") + `,` + item("b", "y") + `], "note": "hi"}`, "does not match the schema"},
		{"duplicate ids", `{"subtasks": [` + item("a", "x") + `,` + item("a", "y") + `]}`, `duplicate id "a"`},
		{"forward dependency", `{"subtasks": [{"id": "a", "title": "x", "description": "", "acceptance_criteria": ["c"], "depends_on": ["b"]},` + item("b", "y") + `]}`, `depends_on "b" is not an earlier subtask`},
		{"the parent again", `{"subtasks": [` + item("a", "x") + `, {"id": "b", "title": "build the REPORT", "description": "", "acceptance_criteria": ["report.md lists every profile"]}]}`, "is the parent task again"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.reply, parent, 2, nil)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, c.want)
			}
		})
	}
}
