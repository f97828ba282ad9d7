package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fakeArtifacts is an in-memory Artifacts; err, when set, is returned for
// every call to simulate a failing store.
type fakeArtifacts struct {
	items map[string]string
	err   error
}

func (f *fakeArtifacts) GetArtifact(_ context.Context, id string) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	s, ok := f.items[id]
	if !ok {
		return "", fmt.Errorf("artifact %s: %w", id, ErrArtifactNotFound)
	}
	return s, nil
}

func newExec(t *testing.T, opt Options) (*Executor, *Workspace, string) {
	t.Helper()
	w, outside := newTree(t)
	return NewExecutor(w, nil, opt), w, outside
}

// call runs a tool with args marshalled from v (or used verbatim when v is a
// string) and fails the test on a Go error.
func call(t *testing.T, e *Executor, name string, v any) Result {
	t.Helper()
	argsJSON, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		argsJSON = string(b)
	}
	res, err := e.Execute(context.Background(), name, argsJSON)
	if err != nil {
		t.Fatalf("Execute(%s, %s): unexpected Go error %v", name, argsJSON, err)
	}
	return res
}

func wantError(t *testing.T, res Result, parts ...string) {
	t.Helper()
	if res.Error == "" {
		t.Fatalf("no tool error; output %q", res.Output)
	}
	for _, p := range parts {
		if !strings.Contains(res.Error, p) {
			t.Errorf("error %q does not mention %q", res.Error, p)
		}
	}
}

func wantOK(t *testing.T, res Result) {
	t.Helper()
	if res.Error != "" {
		t.Fatalf("tool error: %s", res.Error)
	}
}

func TestExecuteBadInput(t *testing.T) {
	e, _, _ := newExec(t, Options{})
	tests := []struct {
		name, tool, args string
		want             []string
	}{
		{"unknown tool", "delete_everything", `{}`, []string{`unknown tool "delete_everything"`, "read_file", "run"}},
		{"not JSON", "read_file", `{"path": `, []string{"read_file", "not valid JSON", `"path"`}},
		{"not an object", "read_file", `["a.txt"]`, []string{"read_file", "must be a JSON object", "array"}},
		{"missing field", "read_file", `{}`, []string{"read_file", `argument "path" is required`}},
		{"wrong type", "read_file", `{"path": 3}`, []string{"read_file", `argument "path" must be a string`, "number"}},
		{"wrong type bool", "edit_file", `{"path":"a.txt","old":"a","new":"b","replace_all":"yes"}`, []string{"edit_file", `"replace_all" must be a boolean`}},
		{"fractional integer", "read_file", `{"path":"a.txt","offset_line":1.5}`, []string{"read_file", `"offset_line" must be an integer`}},
		{"unknown argument", "write_file", `{"path":"a.txt","content":"x","mode":"0755"}`, []string{"write_file", `unknown argument "mode"`}},
		{"null required", "write_file", `{"path":"a.txt","content":null}`, []string{"write_file", `argument "content" is required`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, call(t, e, tt.tool, tt.args), tt.want...)
		})
	}
}

func TestExecuteLenientArgs(t *testing.T) {
	e, _, _ := newExec(t, Options{})
	// No arguments at all means defaults for a tool whose arguments are optional.
	for _, args := range []string{"", "null", "{}"} {
		res := call(t, e, "list_dir", args)
		wantOK(t, res)
		if !strings.Contains(res.Output, "a.txt") {
			t.Errorf("list_dir %q: %q", args, res.Output)
		}
	}
	// An integral decimal is accepted as an integer.
	res := call(t, e, "read_file", `{"path":"a.txt","offset_line":1.0}`)
	wantOK(t, res)
}

func TestExecuteCancelledContext(t *testing.T) {
	e, _, _ := newExec(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, name := range Names() {
		if _, err := e.Execute(ctx, name, `{}`); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: err = %v, want context.Canceled", name, err)
		}
	}
}

func TestEveryToolIsDispatched(t *testing.T) {
	e, _, _ := newExec(t, Options{})
	for _, name := range Names() {
		res := call(t, e, name, `{}`)
		if strings.Contains(res.Error, "unknown tool") || strings.Contains(res.Error, "not implemented") {
			t.Errorf("%s: %s", name, res.Error)
		}
	}
}

func TestReadArtifact(t *testing.T) {
	w, _ := newTree(t)
	arts := &fakeArtifacts{items: map[string]string{"art-1": "full output"}}
	e := NewExecutor(w, arts, Options{})

	res := call(t, e, "read_artifact", map[string]any{"id": "art-1"})
	wantOK(t, res)
	if res.Output != "full output" {
		t.Errorf("output %q", res.Output)
	}
	wantError(t, call(t, e, "read_artifact", map[string]any{"id": "nope"}), "read_artifact", `"nope"`, "not found")
	wantError(t, call(t, e, "read_artifact", map[string]any{"id": ""}), "read_artifact", `"id"`)

	noStore := NewExecutor(w, nil, Options{})
	wantError(t, call(t, noStore, "read_artifact", map[string]any{"id": "art-1"}), "read_artifact", "no artifact store")

	boom := errors.New("redis down")
	broken := NewExecutor(w, &fakeArtifacts{err: boom}, Options{})
	if _, err := broken.Execute(context.Background(), "read_artifact", `{"id":"art-1"}`); !errors.Is(err, boom) {
		t.Errorf("store failure: err = %v, want it wrapped", err)
	}
}

func TestResultText(t *testing.T) {
	cases := []struct {
		tool string
		res  Result
		want string
	}{
		{"read_file", Result{Output: "hello\n"}, "hello\n"},
		{"read_file", Result{Error: `read_file: path "x" does not exist`}, `error: read_file: path "x" does not exist`},
		{"run", Result{Output: "ok\n"}, "exit code 0\nok\n"},
		{"run", Result{Output: "partial", Error: "timed out", ExitCode: -1}, "exit code -1\npartial\nerror: timed out"},
	}
	for _, c := range cases {
		if got := c.res.Text(c.tool); got != c.want {
			t.Errorf("%s %+v: %q, want %q", c.tool, c.res, got, c.want)
		}
	}
}

func TestTextFailed(t *testing.T) {
	for content, want := range map[string]bool{
		"exit code 0\nok":                   false,
		"exit code 0":                       false,
		"exit code 2\nboom":                 true,
		"error: path escapes the workspace": true,
		"partial output\nerror: timed out":  true,
		"wrote 3 bytes":                     false,
		"the error handling code is here":   false,
	} {
		if got := TextFailed(content); got != want {
			t.Errorf("TextFailed(%q) = %v, want %v", content, got, want)
		}
	}
}
