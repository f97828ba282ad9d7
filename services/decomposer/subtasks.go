package decomposer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/ralphmesh/ralph/pkg/prd"
)

// SubtaskSchema is the JSON schema the decomposer model's reply must match.
// It is also sent to the model as the response format, so an endpoint that
// supports structured output is held to it; one that does not is checked
// here all the same.
const SubtaskSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["subtasks"],
  "properties": {
    "subtasks": {
      "type": "array",
      "minItems": 2,
      "items": {
        "type": "object",
        "additionalProperties": false,
        "required": ["id", "title", "description", "acceptance_criteria"],
        "properties": {
          "id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$"},
          "title": {"type": "string", "minLength": 1, "pattern": "\\S"},
          "description": {"type": "string"},
          "acceptance_criteria": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1, "pattern": "\\S"}},
          "depends_on": {"type": "array", "items": {"type": "string"}}
        }
      }
    }
  }
}`

var schema = func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(SubtaskSchema))
	if err != nil {
		panic(fmt.Sprintf("decomposer: subtask schema is not JSON: %v", err))
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("subtasks.json", doc); err != nil {
		panic(fmt.Sprintf("decomposer: subtask schema: %v", err))
	}
	return c.MustCompile("subtasks.json")
}()

// reply is the model's answer once it matched the schema.
type reply struct {
	Subtasks []struct {
		ID                 string   `json:"id"`
		Title              string   `json:"title"`
		Description        string   `json:"description"`
		AcceptanceCriteria []string `json:"acceptance_criteria"`
		DependsOn          []string `json:"depends_on"`
	} `json:"subtasks"`
}

// ErrInvalid is wrapped by every reason a reply cannot be used.
var ErrInvalid = errors.New("invalid decomposition")

// Parse checks the model's reply against the schema and the rules that
// stop runaway splitting, and returns the subtasks of parent with session
// ids: <parent>.<n> in the model's order (the model's own ids only link
// its depends_on), never one in taken. A reply wrapped in a Markdown code
// fence is accepted; anything else around the JSON is not.
func Parse(text string, parent prd.Task, maxSubtasks int, taken []string) ([]prd.Task, error) {
	raw := strings.TrimSpace(text)
	if f, ok := strings.CutPrefix(raw, "```"); ok {
		f = strings.TrimPrefix(f, "json")
		if body, ok := strings.CutSuffix(strings.TrimSpace(f), "```"); ok {
			raw = strings.TrimSpace(body)
		}
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrInvalid, err)
	}
	if err := schema.Validate(doc); err != nil {
		return nil, fmt.Errorf("%w: does not match the schema: %s", ErrInvalid, schemaError(err))
	}
	var r reply
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	used := map[string]bool{}
	for _, id := range taken {
		used[id] = true
	}
	rename := map[string]string{}
	out := make([]prd.Task, 0, len(r.Subtasks))
	for i, st := range r.Subtasks {
		if _, dup := rename[st.ID]; dup {
			return nil, fmt.Errorf("%w: subtasks[%d]: duplicate id %q", ErrInvalid, i, st.ID)
		}
		id := freeID(parent.ID, i+1, used)
		used[id] = true
		t := prd.Task{ID: id, Title: strings.TrimSpace(st.Title), Description: strings.TrimSpace(st.Description),
			AcceptanceCriteria: st.AcceptanceCriteria, ParentID: parent.ID}
		for _, d := range st.DependsOn {
			mapped, ok := rename[d]
			if !ok {
				return nil, fmt.Errorf("%w: subtasks[%d] (%s): depends_on %q is not an earlier subtask", ErrInvalid, i, st.ID, d)
			}
			t.DependsOn = append(t.DependsOn, mapped)
		}
		rename[st.ID] = id
		out = append(out, t)
	}
	if err := parent.CheckSubtasks(out, maxSubtasks, func(id string) bool { return slices.Contains(taken, id) }); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return out, nil
}

// freeID is <parent>.<n>, or with a letter suffix when the PRD already
// has that id.
func freeID(parent string, n int, used map[string]bool) string {
	id := fmt.Sprintf("%s.%d", parent, n)
	for c := 'b'; used[id]; c++ {
		id = fmt.Sprintf("%s.%d%c", parent, n, c)
	}
	return id
}

// schemaError is the schema validator's message for the deepest failure,
// on one line: enough for the model to repair its reply and for a person
// to read in an escalation.
func schemaError(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	loc := "/" + strings.Join(ve.InstanceLocation, "/")
	return fmt.Sprintf("at %s: %s", loc, ve.ErrorKind.LocalizedString(message.NewPrinter(language.English)))
}
