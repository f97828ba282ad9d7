package compaction

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/jsontype"
	"github.com/ralphmesh/ralph/pkg/tokens"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Phase is where the task is: exploring the workspace, drafting its
// deliverables, or finalizing them after review.
type Phase string

// Phases.
const (
	PhaseExploring  Phase = "exploring"
	PhaseDrafting   Phase = "drafting"
	PhaseFinalizing Phase = "finalizing"
)

// Task is what the context is for. Phase may be empty: the planner then
// detects it (DetectPhase).
type Task struct {
	Goal  string `json:"goal"`
	Phase Phase  `json:"phase,omitempty"`
}

// Document is the planner's input: the context of one task with the model's
// token limit (docs/REFERENCE.md, "Context document"). Units may be stored units,
// assistant messages still carrying their Calls; the planner expands them
// (ExpandCalls).
type Document struct {
	LimitTokens int          `json:"limit_tokens"`
	CurrentTurn int          `json:"current_turn"`
	Task        Task         `json:"task"`
	Units       []units.Unit `json:"units"`
}

// ErrInvalidDocument is wrapped by every error about a document's content.
var ErrInvalidDocument = errors.New("invalid context document")

var (
	validRoles = []string{openai.ChatMessageRoleSystem, openai.ChatMessageRoleUser, openai.ChatMessageRoleAssistant, openai.ChatMessageRoleTool}
	validKinds = []string{units.KindMessage, units.KindToolCall, units.KindToolResult, units.KindSummary}
)

// The JSON names each object may have; anything else is a typo that would
// otherwise be dropped silently.
var (
	documentFields = []string{"limit_tokens", "current_turn", "task", "units"}
	taskFields     = []string{"goal", "phase"}
	unitFields     = []string{"id", "role", "kind", "tool", "call_id", "args", "content", "turn", "tokens", "calls", "artifact"}
	callFields     = []string{"id", "name", "args"}
)

// sharedCounter is built on first use only: building a tokenizer takes a few
// hundred milliseconds, and most documents give every unit's tokens.
var sharedCounter = sync.OnceValues(tokens.New)

// DecodeDocument decodes and validates a context document. Decoding is
// strict: unknown fields, wrong JSON types, unknown roles, kinds and phases,
// duplicate unit or call ids and a limit_tokens that is not positive are
// errors that name the field and, inside a unit, its index and id, e.g.
// `units[3] (id "u4"): field kind: unknown kind "foo"`.
//
// A unit's tokens, when given (0 included), is taken as is; when absent it
// is counted with pkg/tokens: content, plus tool name and arguments for a
// tool_call and for each of a message's calls (the builder's own rule).
// A current_turn of 0 or absent means the latest turn of any unit.
//
// Lenient on purpose: a tool_result whose call_id matches no tool_call is
// valid (its call may already be in the checkpoint, or the document is a
// partial view) and is then planned as a unit of its own; so is a tool_call
// without a result, or either without a call_id. Role and kind are not
// cross-checked beyond calls being allowed on assistant messages only.
func DecodeDocument(data []byte) (Document, error) {
	return decodeDocument(data, func() (func(string) int, error) {
		c, err := sharedCounter()
		if err != nil {
			return nil, err
		}
		return c.Count, nil
	})
}

func decodeDocument(data []byte, counter func() (func(string) int, error)) (Document, error) {
	var doc Document
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	top, err := decodeObject(data, documentFields)
	if err != nil {
		return doc, fmt.Errorf("%w: %w", ErrInvalidDocument, err)
	}
	if _, ok := top["limit_tokens"]; !ok {
		return doc, fmt.Errorf("%w: field limit_tokens: required", ErrInvalidDocument)
	}
	if _, ok := top["units"]; !ok {
		return doc, fmt.Errorf("%w: field units: required", ErrInvalidDocument)
	}
	if err := decodeValue("limit_tokens", top["limit_tokens"], &doc.LimitTokens); err != nil {
		return doc, fmt.Errorf("%w: %w", ErrInvalidDocument, err)
	}
	if err := decodeValue("current_turn", top["current_turn"], &doc.CurrentTurn); err != nil {
		return doc, fmt.Errorf("%w: %w", ErrInvalidDocument, err)
	}
	if raw, ok := top["task"]; ok && !isNull(raw) {
		tf, err := decodeObject(raw, taskFields)
		if err != nil {
			return doc, fmt.Errorf("%w: task: %w", ErrInvalidDocument, err)
		}
		if err := decodeValue("goal", tf["goal"], &doc.Task.Goal); err != nil {
			return doc, fmt.Errorf("%w: task: %w", ErrInvalidDocument, err)
		}
		if err := decodeValue("phase", tf["phase"], &doc.Task.Phase); err != nil {
			return doc, fmt.Errorf("%w: task: %w", ErrInvalidDocument, err)
		}
	}
	var rawUnits []json.RawMessage
	if err := decodeValue("units", top["units"], &rawUnits); err != nil {
		return doc, fmt.Errorf("%w: %w", ErrInvalidDocument, err)
	}
	doc.Units = make([]units.Unit, 0, len(rawUnits))
	var count func(string) int
	for i, raw := range rawUnits {
		u, hasTokens, err := decodeUnit(raw)
		if err != nil {
			return doc, fmt.Errorf("%w: %s: %w", ErrInvalidDocument, unitWhere(i, u.ID), err)
		}
		if !hasTokens {
			if count == nil {
				if count, err = counter(); err != nil {
					return doc, fmt.Errorf("count tokens of %s: %w", unitWhere(i, u.ID), err)
				}
			}
			u.Tokens = unitTokens(u, count)
		}
		doc.Units = append(doc.Units, u)
	}
	if doc.CurrentTurn == 0 {
		doc.CurrentTurn = latestTurn(doc.Units)
	}
	if err := doc.Validate(); err != nil {
		return doc, err
	}
	return doc, nil
}

// decodeUnit decodes one unit field by field, so that an error names the
// field; the id comes first so that every later error can name the unit.
func decodeUnit(raw json.RawMessage) (u units.Unit, hasTokens bool, err error) {
	fields, err := decodeObject(raw, nil)
	if err != nil {
		return u, false, err
	}
	if err := decodeValue("id", fields["id"], &u.ID); err != nil {
		return u, false, err
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !slices.Contains(unitFields, k) {
			return u, false, fmt.Errorf("field %s: unknown field", k)
		}
	}
	targets := []struct {
		name string
		v    any
	}{
		{"role", &u.Role}, {"kind", &u.Kind}, {"tool", &u.Tool}, {"call_id", &u.CallID},
		{"content", &u.Content}, {"turn", &u.Turn}, {"tokens", &u.Tokens}, {"artifact", &u.Artifact},
	}
	for _, t := range targets {
		if err := decodeValue(t.name, fields[t.name], t.v); err != nil {
			return u, false, err
		}
	}
	if raw, ok := fields["args"]; ok && !isNull(raw) {
		switch firstByte(raw) {
		case '{', '"':
			u.Args = json.RawMessage(bytes.TrimSpace(raw))
		default:
			return u, false, fmt.Errorf("field args: want object or string, got %s", jsontype.Of(raw))
		}
	}
	if raw, ok := fields["calls"]; ok && !isNull(raw) {
		var rawCalls []json.RawMessage
		if err := decodeValue("calls", raw, &rawCalls); err != nil {
			return u, false, err
		}
		for j, rc := range rawCalls {
			cf, err := decodeObject(rc, callFields)
			if err != nil {
				return u, false, fmt.Errorf("calls[%d]: %w", j, err)
			}
			var c units.Call
			for _, t := range []struct {
				name string
				v    *string
			}{{"id", &c.ID}, {"name", &c.Name}, {"args", &c.Args}} {
				if err := decodeValue(t.name, cf[t.name], t.v); err != nil {
					return u, false, fmt.Errorf("calls[%d]: %w", j, err)
				}
			}
			u.Calls = append(u.Calls, c)
		}
	}
	tokensRaw, given := fields["tokens"]
	return u, given && !isNull(tokensRaw), nil
}

// Validate checks what DecodeDocument checks after decoding, for documents
// built in code: the limit, the phase, each unit's role, kind, turn and
// tokens, and that unit ids (including the ids ExpandCalls gives calls) and
// call ids are unique.
func (d Document) Validate() error {
	if d.LimitTokens <= 0 {
		return fmt.Errorf("%w: field limit_tokens: must be greater than 0, got %d", ErrInvalidDocument, d.LimitTokens)
	}
	if d.CurrentTurn < 0 {
		return fmt.Errorf("%w: field current_turn: must not be negative, got %d", ErrInvalidDocument, d.CurrentTurn)
	}
	switch d.Task.Phase {
	case "", PhaseExploring, PhaseDrafting, PhaseFinalizing:
	default:
		return fmt.Errorf("%w: task: field phase: unknown phase %q (want exploring, drafting or finalizing)", ErrInvalidDocument, d.Task.Phase)
	}
	ids := make(map[string]string, len(d.Units))
	callIDs := map[string]string{}
	resultIDs := map[string]string{}
	claim := func(seen map[string]string, key, where string) string {
		if prev, dup := seen[key]; dup {
			return prev
		}
		seen[key] = where
		return ""
	}
	for i, u := range d.Units {
		where := unitWhere(i, u.ID)
		fail := func(format string, a ...any) error {
			return fmt.Errorf("%w: %s: %s", ErrInvalidDocument, where, fmt.Sprintf(format, a...))
		}
		switch {
		case u.ID == "":
			return fail("field id: required")
		case !slices.Contains(validRoles, u.Role):
			return fail("field role: unknown role %q (want %s)", u.Role, strings.Join(validRoles, ", "))
		case !slices.Contains(validKinds, u.Kind):
			return fail("field kind: unknown kind %q (want %s)", u.Kind, strings.Join(validKinds, ", "))
		case u.Turn < 0:
			return fail("field turn: must not be negative, got %d", u.Turn)
		case u.Tokens < 0:
			return fail("field tokens: must not be negative, got %d", u.Tokens)
		case len(u.Calls) > 0 && (u.Role != openai.ChatMessageRoleAssistant || u.Kind != units.KindMessage):
			return fail("field calls: only an assistant message carries calls (role %s, kind %s)", u.Role, u.Kind)
		}
		if prev := claim(ids, u.ID, where); prev != "" {
			return fail("field id: duplicate id (also %s)", prev)
		}
		switch u.Kind {
		case units.KindToolCall:
			if u.CallID != "" {
				if prev := claim(callIDs, u.CallID, where); prev != "" {
					return fail("field call_id: duplicate call %q (also %s)", u.CallID, prev)
				}
			}
		case units.KindToolResult:
			if u.CallID != "" {
				if prev := claim(resultIDs, u.CallID, where); prev != "" {
					return fail("field call_id: a second result for call %q (also %s)", u.CallID, prev)
				}
			}
		}
		for j, c := range u.Calls {
			cwhere := fmt.Sprintf("%s calls[%d]", where, j)
			switch {
			case c.ID == "":
				return fail("calls[%d]: field id: required", j)
			case c.Name == "":
				return fail("calls[%d]: field name: required", j)
			}
			if prev := claim(ids, callUnitID(u.ID, c.ID), cwhere); prev != "" {
				return fail("calls[%d]: its unit id %q is already taken by %s", j, callUnitID(u.ID, c.ID), prev)
			}
			if prev := claim(callIDs, c.ID, cwhere); prev != "" {
				return fail("calls[%d]: field id: duplicate call %q (also %s)", j, c.ID, prev)
			}
		}
	}
	return nil
}

// unitTokens counts what the model sees of u, the way the builder does.
func unitTokens(u units.Unit, count func(string) int) int {
	n := count(u.Content)
	if u.Kind == units.KindToolCall {
		n += count(u.Tool) + count(string(u.Args))
	}
	for _, c := range u.Calls {
		n += count(c.Name) + count(c.Args)
	}
	return n
}

func latestTurn(us []units.Unit) int {
	n := 0
	for _, u := range us {
		n = max(n, u.Turn)
	}
	return n
}

func unitWhere(i int, id string) string {
	if id == "" {
		return fmt.Sprintf("units[%d]", i)
	}
	return fmt.Sprintf("units[%d] (id %q)", i, id)
}

// decodeObject decodes a JSON object into its fields, rejecting any name not
// in known (nil: accept all, the caller checks).
func decodeObject(data []byte, known []string) (map[string]json.RawMessage, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("empty input, want a JSON object")
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return nil, fmt.Errorf("bad JSON: %w", err)
	}
	if data[0] != '{' {
		return nil, fmt.Errorf("want a JSON object, got %s", jsontype.Of(data))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, fmt.Errorf("bad JSON: %w", err)
	}
	if known != nil {
		names := make([]string, 0, len(fields))
		for k := range fields {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if !slices.Contains(known, k) {
				return nil, fmt.Errorf("field %s: unknown field", k)
			}
		}
	}
	return fields, nil
}

// decodeValue decodes one field; an absent or null field leaves v as is.
func decodeValue(name string, raw json.RawMessage, v any) error {
	if raw == nil || isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("field %s: want %s, got %s", name, jsontype.For(reflect.TypeOf(v).Elem()), te.Value)
		}
		return fmt.Errorf("field %s: %w", name, err)
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func firstByte(raw json.RawMessage) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}
