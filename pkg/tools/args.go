package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/sashabaranov/go-openai/jsonschema"
)

// args holds one call's arguments after validation against the tool's spec.
// Validation happens once, up front, so handlers read values without
// re-checking and every bad-input message has the same shape.
type args struct {
	raw map[string]json.RawMessage
}

// parseArgs decodes argsJSON for spec. On bad input it returns a message for
// the model that names the tool and the argument and says what was expected.
func parseArgs(spec toolSpec, argsJSON string) (args, string) {
	a := args{raw: map[string]json.RawMessage{}}
	text := strings.TrimSpace(argsJSON)
	// Models sometimes send nothing at all for a tool whose arguments are all
	// optional; that means "use the defaults", not a syntax error.
	if text == "" || text == "null" {
		text = "{}"
	}
	var probe any
	if err := json.Unmarshal([]byte(text), &probe); err != nil {
		return a, fmt.Sprintf("%s: arguments are not valid JSON (%v); %s", spec.name, err, spec.usage())
	}
	if _, ok := probe.(map[string]any); !ok {
		return a, fmt.Sprintf("%s: arguments must be a JSON object, got %s; %s", spec.name, jsonKind([]byte(text)), spec.usage())
	}
	if err := json.Unmarshal([]byte(text), &a.raw); err != nil {
		return a, fmt.Sprintf("%s: decoding arguments: %v; %s", spec.name, err, spec.usage())
	}

	// Unknown names are reported rather than ignored: a misspelt optional
	// argument (say "replaceAll") would otherwise silently do the wrong thing.
	keys := make([]string, 0, len(a.raw))
	for k := range a.raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := spec.param(k); !ok {
			return a, fmt.Sprintf("%s: unknown argument %q; %s", spec.name, k, spec.usage())
		}
		if jsonKind(a.raw[k]) == "null" {
			delete(a.raw, k) // an explicit null means "not given"
		}
	}
	for _, p := range spec.params {
		v, ok := a.raw[p.name]
		if !ok {
			if p.required {
				return a, fmt.Sprintf("%s: argument %q is required; %s", spec.name, p.name, spec.usage())
			}
			continue
		}
		if !hasType(v, p.typ) {
			return a, fmt.Sprintf("%s: argument %q must be %s, got %s", spec.name, p.name, article(p.typ), describe(v))
		}
	}
	return a, ""
}

func (a args) has(name string) bool {
	_, ok := a.raw[name]
	return ok
}

// The getters below rely on parseArgs having checked the type; an absent
// argument yields def.

func (a args) str(name, def string) string {
	v, ok := a.raw[name]
	if !ok {
		return def
	}
	var s string
	_ = json.Unmarshal(v, &s)
	return s
}

func (a args) integer(name string, def int) int {
	v, ok := a.raw[name]
	if !ok {
		return def
	}
	f, _ := strconv.ParseFloat(string(v), 64)
	return int(f)
}

func (a args) number(name string, def float64) float64 {
	v, ok := a.raw[name]
	if !ok {
		return def
	}
	f, _ := strconv.ParseFloat(string(v), 64)
	return f
}

func (a args) boolean(name string, def bool) bool {
	v, ok := a.raw[name]
	if !ok {
		return def
	}
	return string(v) == "true"
}

func hasType(v json.RawMessage, typ jsonschema.DataType) bool {
	kind := jsonKind(v)
	switch typ {
	case jsonschema.String:
		return kind == "string"
	case jsonschema.Boolean:
		return kind == "boolean"
	case jsonschema.Number:
		return kind == "number"
	case jsonschema.Integer:
		if kind != "number" {
			return false
		}
		// 3.0 is accepted: some models always emit decimals.
		f, err := strconv.ParseFloat(string(v), 64)
		return err == nil && f == math.Trunc(f) && math.Abs(f) <= 1<<53
	}
	return false
}

// jsonKind names the JSON type of a valid JSON value.
func jsonKind(v []byte) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// describe renders a wrong-typed value for an error message, short enough
// not to echo a whole file back at the model.
func describe(v json.RawMessage) string {
	return jsonKind(v) + " " + shorten(string(bytes.TrimSpace(v)), 40)
}

func article(typ jsonschema.DataType) string {
	switch typ {
	case jsonschema.Integer, jsonschema.Object, jsonschema.Array:
		return "an " + string(typ)
	}
	return "a " + string(typ)
}
