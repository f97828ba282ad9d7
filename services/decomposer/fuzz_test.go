package decomposer

import (
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/prd"
)

// FuzzParse: any reply never panics; what it accepts obeys the rules that
// stop runaway splitting — 2 to max subtasks, fresh ids under the parent,
// none the parent again, dependencies only on earlier siblings — whatever
// the model wrote.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"subtasks": [{"id": "a", "title": "A", "description": "d", "acceptance_criteria": ["x"], "depends_on": []},
		               {"id": "b", "title": "B", "description": "d", "acceptance_criteria": ["y"], "depends_on": ["a"]}]}`,
		"```json\n{\"subtasks\": [{\"id\": \"a\", \"title\": \"A\", \"acceptance_criteria\": [\"x\"]}, {\"id\": \"b\", \"title\": \"B\", \"acceptance_criteria\": [\"y\"], \"depends_on\": [\"b\"]}]}\n```",
		`{"subtasks": [{"id": "a", "title": "A", "acceptance_criteria": ["x"], "depends_on": ["z"]}]}`,
		`{"subtasks": []}`,
		`[1, 2]`,
		`not json`,
		"",
	} {
		f.Add(s, 4)
	}
	parent := prd.Task{ID: "T1", Title: "Parent", AcceptanceCriteria: []string{"done"}}
	f.Fuzz(func(t *testing.T, text string, max int) {
		max = 2 + (max%7+7)%7
		subs, err := Parse(text, parent, max, []string{"T1", "T1.1"})
		if err != nil {
			return
		}
		if len(subs) < 2 || len(subs) > max {
			t.Fatalf("accepted %d subtasks with max %d", len(subs), max)
		}
		seen := map[string]int{}
		for i, s := range subs {
			if s.ID == "T1" || s.ID == "T1.1" || !strings.HasPrefix(s.ID, "T1.") {
				t.Fatalf("subtask id %q is taken or not under the parent", s.ID)
			}
			if _, dup := seen[s.ID]; dup {
				t.Fatalf("duplicate subtask id %q", s.ID)
			}
			for _, d := range s.DependsOn {
				j, ok := seen[d]
				if !ok || j >= i {
					t.Fatalf("subtask %s depends on %q, not an earlier sibling", s.ID, d)
				}
			}
			if s.SameWork(parent) {
				t.Fatalf("subtask %s is the parent again", s.ID)
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("accepted an invalid subtask: %v", err)
			}
			seen[s.ID] = i
		}
	})
}
