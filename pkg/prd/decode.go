package prd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"
)

// DecodeError is a PRD file that is not well-formed YAML or JSON, or whose
// fields have the wrong shape or an unknown name. It wraps ErrInvalid.
type DecodeError struct {
	// Line and Column (1-based; the column counts characters) are where
	// the problem is. Both are 0 when it has no place, as in an empty file.
	Line, Column int
	// Task names the task the problem is in (`task "T1"`, or `task 2`
	// when it has no id); empty outside the tasks.
	Task string
	// Field is the field the problem is in; empty when it is in none.
	Field string
	// Msg says what is wrong.
	Msg string
}

func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalid.Error())
	b.WriteString(": ")
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
	}
	if e.Task != "" {
		b.WriteString(e.Task + ": ")
	}
	if e.Field != "" {
		b.WriteString("field " + e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes every DecodeError an ErrInvalid.
func (e *DecodeError) Unwrap() error { return ErrInvalid }

// fieldNames are the names a struct's fields have under a tag, so that a key
// outside them can be reported as an unknown field by name.
func fieldNames(t reflect.Type, tag string) map[string]bool {
	m := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get(tag), ",")
		m[name] = true
	}
	return m
}

var (
	yamlPRDFields  = fieldNames(reflect.TypeFor[PRD](), "yaml")
	yamlTaskFields = fieldNames(reflect.TypeFor[Task](), "yaml")
	jsonPRDFields  = fieldNames(reflect.TypeFor[PRD](), "json")
	jsonTaskFields = fieldNames(reflect.TypeFor[Task](), "json")
)

// decodeYAML decodes one YAML document strictly: unknown fields are errors,
// so that a typo does not silently drop a criterion, and so is a second
// document, which would otherwise be ignored.
//
// It uses go.yaml.in/yaml/v4 rather than gopkg.in/yaml.v3 because v3 reports
// a syntax error at the line where the enclosing block began (an error on
// line 5 comes out as "line 1" or "line 2"); v4's errors carry the line and
// column of the problem itself.
func decodeYAML(data []byte) (PRD, error) {
	var p PRD
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return PRD{}, yamlError(data, err)
	}
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if err == io.EOF {
			return p, nil
		}
		if err != nil {
			return PRD{}, yamlError(data, err)
		}
		// A trailing "---" with nothing (or null) after it is harmless.
		if len(more.Content) > 0 && more.Content[0].ShortTag() != "!!null" {
			return PRD{}, &DecodeError{Line: more.Line, Column: more.Column, Msg: "bad YAML: more than one document"}
		}
	}
}

// yamlError turns a decoding error into a DecodeError with the problem's
// position and, when the document is well-formed, the task and field it is
// in.
func yamlError(data []byte, err error) error {
	if errors.Is(err, io.EOF) {
		return &DecodeError{Msg: "bad YAML: no document (the file is empty)"}
	}
	var le *yaml.LoadError // a *yaml.LoadErrors gives its first error
	if !errors.As(err, &le) {
		return &DecodeError{Msg: "bad YAML: " + err.Error()}
	}
	e := &DecodeError{Msg: "bad YAML: " + le.Message}
	e.Line, e.Column = clampToDocument(data, le.Mark.Line, le.Mark.Column)
	if le.ContextMsg != "" && le.ContextMark.Line > 0 && le.ContextMark != le.Mark {
		// Where the construct that failed began, e.g. "while parsing a
		// block collection at line 2, column 3": often the real mistake.
		e.Msg += fmt.Sprintf(" (%s at line %d, column %d)", le.ContextMsg, le.ContextMark.Line, le.ContextMark.Column)
	}
	locateYAML(data, e)
	return e
}

// clampToDocument keeps a position inside data: the YAML scanner reports
// an error at the end of a document that does not end in a newline on the
// line after the last one, which no editor can show. Such a position
// becomes the end of the last line.
func clampToDocument(data []byte, line, col int) (int, int) {
	lines := strings.Split(string(data), "\n")
	if line <= len(lines) {
		return line, col
	}
	last := lines[len(lines)-1]
	return len(lines), utf8.RuneCountInString(last) + 1
}

// yamlSpot is a place in a well-formed PRD that a position can fall in: a
// top-level key (task -1), a task, or a task's key.
type yamlSpot struct {
	task  int
	id    string
	field string
	node  *yaml.Node
}

// locateYAML fills in e's task and field from the document's node tree: the
// spot is the last key or task that starts at or before e's position. When
// the position is that of a key the PRD does not have, the message says so
// plainly instead of naming a Go type. A document that does not parse is
// left as it is: its error has a position but no task.
func locateYAML(data []byte, e *DecodeError) {
	var root yaml.Node
	if e.Line == 0 || yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return
	}
	before := func(n *yaml.Node) bool {
		return n.Line < e.Line || (n.Line == e.Line && n.Column <= e.Column)
	}
	var best *yamlSpot
	top := root.Content[0].Content
	for j := 0; j+1 < len(top); j += 2 {
		k, v := top[j], top[j+1]
		if !before(k) {
			break
		}
		best = &yamlSpot{task: -1, field: k.Value, node: k}
		if k.Value != "tasks" || v.Kind != yaml.SequenceNode {
			continue
		}
		for i, item := range v.Content {
			if !before(item) {
				break
			}
			id := ""
			for f := 0; f+1 < len(item.Content) && item.Kind == yaml.MappingNode; f += 2 {
				if item.Content[f].Value == "id" && item.Content[f+1].Kind == yaml.ScalarNode {
					id = item.Content[f+1].Value
				}
			}
			best = &yamlSpot{task: i, id: id, node: item}
			for f := 0; f+1 < len(item.Content) && item.Kind == yaml.MappingNode; f += 2 {
				if key := item.Content[f]; before(key) {
					best = &yamlSpot{task: i, id: id, field: key.Value, node: key}
				}
			}
		}
	}
	if best == nil {
		return
	}
	known := yamlPRDFields
	if best.task >= 0 {
		e.Task = taskLabel(best.task, best.id)
		known = yamlTaskFields
	}
	e.Field = best.field
	at := best.node.Line == e.Line && best.node.Column == e.Column
	if best.field != "" && at && !known[best.field] && best.node.Tag != "!!merge" {
		e.Msg = "unknown field"
	}
}

// decodeJSON decodes one JSON document strictly, like decodeYAML.
func decodeJSON(data []byte) (PRD, error) {
	var p PRD
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return PRD{}, jsonError(data, err)
	}
	end := int(dec.InputOffset())
	if _, err := dec.Token(); err != io.EOF {
		line, col := position(data, skip(data, end, ""))
		return PRD{}, &DecodeError{Line: line, Column: col, Msg: "bad JSON: data after the document"}
	}
	return p, nil
}

// jsonError turns a decoding error into a DecodeError. encoding/json gives
// byte offsets (a syntax error's, a type error's) or, for an unknown field,
// nothing at all; the document's index of keys and values turns them into a
// line, a column, a task and a field.
func jsonError(data []byte, err error) error {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return &DecodeError{Msg: "bad JSON: no document (the file is empty)"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col := position(data, len(bytes.TrimRight(data, " \t\r\n")))
		return &DecodeError{Line: line, Column: col, Msg: "bad JSON: unexpected end of the file"}
	case errors.As(err, &syntax):
		// Offset counts the bytes read, the offending one included.
		line, col := position(data, int(syntax.Offset)-1)
		return &DecodeError{Line: line, Column: col, Msg: "bad JSON: " + syntax.Error()}
	case errors.As(err, &typ):
		e := &DecodeError{Msg: fmt.Sprintf("bad JSON: %s where %s is expected", jsonKind(typ.Value), goKind(typ.Type))}
		spots := indexJSON(data)
		for _, s := range spots {
			// The offset is just past a scalar, or just past the opening
			// bracket of an object or array.
			if (s.scalar && s.end == int(typ.Offset)) || (!s.scalar && s.start == int(typ.Offset)-1) {
				e.Line, e.Column = position(data, s.start)
				e.Task, e.Field = jsonLabel(spots, s.path)
				break
			}
		}
		return e
	}
	// DisallowUnknownFields reports an unknown field as a plain error: the
	// first key in the document the PRD does not have is the one.
	spots := indexJSON(data)
	for _, s := range spots {
		if s.key < 0 {
			continue
		}
		unknown := false
		switch len(s.path) {
		case 1:
			unknown = !jsonPRDFields[s.path[0]]
		case 3:
			_, errIndex := strconv.Atoi(s.path[1])
			unknown = s.path[0] == "tasks" && errIndex == nil && !jsonTaskFields[s.path[2]]
		}
		if unknown {
			line, col := position(data, s.key)
			task, field := jsonLabel(spots, s.path)
			return &DecodeError{Line: line, Column: col, Task: task, Field: field, Msg: "unknown field"}
		}
	}
	return &DecodeError{Msg: "bad JSON: " + err.Error()}
}

// jsonSpot is one value of a JSON document and where it is.
type jsonSpot struct {
	// path is the keys and array indexes from the root to the value.
	path []string
	// key is the offset of the key's opening quote; -1 for an array
	// element or the root.
	key int
	// start and end are the offsets of the value's first byte and of the
	// byte after its last.
	start, end int
	scalar     bool
	// str is the value when it is a string.
	str string
}

// indexJSON lists every value of data in document order with its position.
// It stops at the first syntax error, so it is complete only for
// well-formed JSON.
func indexJSON(data []byte) []jsonSpot {
	dec := json.NewDecoder(bytes.NewReader(data))
	var spots []jsonSpot
	var walk func(path []string, key int) bool
	walk = func(path []string, key int) bool {
		// InputOffset is the end of the last token: the next one starts
		// after any space, comma or colon.
		start := skip(data, int(dec.InputOffset()), ",:")
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		i := len(spots)
		spots = append(spots, jsonSpot{path: path, key: key, start: start})
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				k := skip(data, int(dec.InputOffset()), ",:")
				name, err := dec.Token()
				if err != nil {
					return false
				}
				if !walk(append(slices.Clip(path), fmt.Sprint(name)), k) {
					return false
				}
			}
			if _, err := dec.Token(); err != nil {
				return false
			}
		case json.Delim('['):
			for n := 0; dec.More(); n++ {
				if !walk(append(slices.Clip(path), strconv.Itoa(n)), -1) {
					return false
				}
			}
			if _, err := dec.Token(); err != nil {
				return false
			}
		default:
			spots[i].scalar = true
			spots[i].str, _ = tok.(string)
		}
		spots[i].end = int(dec.InputOffset())
		return true
	}
	walk(nil, -1)
	return spots
}

// jsonLabel names the task (or prd.json story) and field a path is in:
// ["tasks", "1", "acceptance_criteria", "0"] is task 2 (by its id when it
// has one), field acceptance_criteria[0].
func jsonLabel(spots []jsonSpot, path []string) (task, field string) {
	rest := path
	if len(path) >= 2 && (path[0] == "tasks" || path[0] == "userStories") {
		if i, err := strconv.Atoi(path[1]); err == nil {
			id := ""
			for _, s := range spots {
				if len(s.path) == 3 && s.path[0] == path[0] && s.path[1] == path[1] && s.path[2] == "id" {
					id = s.str
				}
			}
			label := taskLabel
			if path[0] == "userStories" {
				label = storyLabel
			}
			task, rest = label(i, id), path[2:]
		}
	}
	if len(rest) == 0 {
		return task, ""
	}
	field = rest[0]
	for _, p := range rest[1:] {
		if _, err := strconv.Atoi(p); err == nil {
			field += "[" + p + "]"
		} else {
			field += "." + p
		}
	}
	return task, field
}

// jsonKind is a JSON value kind as encoding/json names it ("string",
// "number 7", "object") with its article.
func jsonKind(v string) string {
	if strings.HasPrefix(v, "object") || strings.HasPrefix(v, "array") {
		return "an " + v
	}
	return "a " + v
}

// goKind says what JSON a Go type takes, so the message names JSON rather
// than Go.
func goKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// skip returns the offset of the first byte at or after off that is neither
// JSON white space nor one of also.
func skip(data []byte, off int, also string) int {
	for off < len(data) && (strings.IndexByte(" \t\r\n", data[off]) >= 0 || strings.IndexByte(also, data[off]) >= 0) {
		off++
	}
	return off
}

// position turns a byte offset into a 1-based line and a 1-based column
// counted in characters.
func position(data []byte, off int) (line, col int) {
	off = max(0, min(off, len(data)))
	before := data[:off]
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return bytes.Count(before, []byte{'\n'}) + 1, utf8.RuneCount(before[lineStart:]) + 1
}
