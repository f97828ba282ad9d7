package tools

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestDefinitions(t *testing.T) {
	want := []string{"read_file", "write_file", "edit_file", "list_dir", "search", "run", "read_artifact"}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	defs := Definitions()
	if len(defs) != len(want) {
		t.Fatalf("%d definitions, want %d", len(defs), len(want))
	}
	required := map[string][]string{
		"read_file":     {"path"},
		"write_file":    {"path", "content"},
		"edit_file":     {"path", "old", "new"},
		"list_dir":      nil,
		"search":        {"pattern"},
		"run":           {"command"},
		"read_artifact": {"id"},
	}
	for i, d := range defs {
		if d.Type != "function" || d.Function == nil || d.Function.Name != want[i] || d.Function.Description == "" {
			t.Fatalf("definition %d: %+v", i, d)
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var decoded struct {
			Function struct {
				Parameters struct {
					Type                 string                     `json:"type"`
					Properties           map[string]json.RawMessage `json:"properties"`
					Required             []string                   `json:"required"`
					AdditionalProperties *bool                      `json:"additionalProperties"`
				} `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(b, &decoded); err != nil {
			t.Fatal(err)
		}
		p := decoded.Function.Parameters
		if p.Type != "object" || len(p.Properties) == 0 || p.AdditionalProperties == nil || *p.AdditionalProperties {
			t.Errorf("%s: parameters %s", want[i], b)
		}
		if !slices.Equal(p.Required, required[want[i]]) {
			t.Errorf("%s: required %v, want %v", want[i], p.Required, required[want[i]])
		}
		for _, r := range p.Required {
			if _, ok := p.Properties[r]; !ok {
				t.Errorf("%s: required %q has no property", want[i], r)
			}
		}
	}
}
