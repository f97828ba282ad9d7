package stuckbench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/services/stuckdetector"
)

func TestScanGolden(t *testing.T) {
	for _, name := range []string{"stuck_circular", "session_mixed"} {
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", name+".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata", name+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := Scan(bytes.NewReader(in), &out, stuckdetector.DefaultConfig(), nil); err != nil {
				t.Fatalf("Scan: %v", err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("output differs from %s.golden\n got:\n%s\nwant:\n%s", name, out.Bytes(), want)
			}
		})
	}
}

func TestScanFormat(t *testing.T) {
	in := `{"iteration":1,"tool_calls":[{"name":"bash","args":{"cmd":"a < b && c"},"output":"same"}]}
{"iteration":2,"tool_calls":[{"name":"bash","args":{"cmd":"a < b && c"},"output":"same"}]}
{"iteration":3,"tool_calls":[{"name":"bash","args":{"cmd":"a < b && c"},"output":"same"}]}
`
	// Field order is the contract; <, > and & stay readable.
	want := `{"iteration":3,"pattern":"circular_tools","confidence":0.85,"action":"nudge","strength":"weak",` +
		`"diagnosis":"bash {\"cmd\":\"a < b && c\"} called 3 times in iterations 1-3 with no workspace change; evidence weak (3 identical calls, threshold 3): a nudge first, prune_context if it goes on"}` + "\n"
	var out bytes.Buffer
	if err := Scan(strings.NewReader(in), &out, stuckdetector.Config{}, nil); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if out.String() != want {
		t.Errorf("output\n got: %s\nwant: %s", out.String(), want)
	}
}

func TestScanInputForms(t *testing.T) {
	line := `{"iteration":%d,"tool_calls":[{"name":"read_file","args":{"path":"a.go"},"output":"x"}]}`
	lines := func(sep string) string {
		var b strings.Builder
		for i := 1; i <= 3; i++ {
			b.WriteString(strings.Replace(line, "%d", string(rune('0'+i)), 1))
			b.WriteString(sep)
		}
		return b.String()
	}
	tests := []struct {
		name string
		in   string
		want int // signal lines
	}{
		{"empty input", "", 0},
		{"only blank lines", "\n  \n\t\n", 0},
		{"no trailing newline", strings.TrimSuffix(lines("\n"), "\n"), 1},
		{"CRLF line ends", lines("\r\n"), 1},
		{"blank lines between", lines("\n\n"), 1},
		{"byte order mark", "\xef\xbb\xbf" + lines("\n"), 1},
		{"unknown fields are ignored", `{"iteration":1,"future_field":true}` + "\n", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Scan(strings.NewReader(tc.in), &out, stuckdetector.Config{}, nil); err != nil {
				t.Fatalf("Scan: %v", err)
			}
			if got := strings.Count(out.String(), "\n"); got != tc.want {
				t.Errorf("%d signal lines, want %d:\n%s", got, tc.want, out.String())
			}
		})
	}
}

func TestScanErrors(t *testing.T) {
	good := `{"iteration":1,"tool_calls":[{"name":"read_file","args":{"path":"a.go"},"output":"x"}]}
{"iteration":2,"tool_calls":[{"name":"read_file","args":{"path":"a.go"},"output":"x"}]}
{"iteration":3,"tool_calls":[{"name":"read_file","args":{"path":"a.go"},"output":"x"}]}
`
	tests := []struct {
		name     string
		in       string
		wantLine int
		wantErr  string
	}{
		{
			name:     "iteration below one after lines that would fire",
			in:       good + `{"iteration":0}` + "\n",
			wantLine: 4,
			wantErr:  "line 4: field iteration: must be >= 1, got 0",
		},
		{
			name:     "missing iteration",
			in:       `{"task_id":"T1"}`,
			wantLine: 1,
			wantErr:  "line 1: field iteration: must be >= 1, got 0",
		},
		{
			name:     "not JSON",
			in:       good[:strings.Index(good, "\n")+1] + "iteration 2\n",
			wantLine: 2,
			wantErr:  "line 2: not JSON: invalid character 'i' looking for beginning of value",
		},
		{
			name:     "truncated line",
			in:       `{"iteration":1,"task_id":"T1"`,
			wantLine: 1,
			wantErr:  "line 1: not JSON: unexpected end of JSON input",
		},
		{
			name:     "two records on one line",
			in:       `{"iteration":1} {"iteration":2}`,
			wantLine: 1,
			wantErr:  "line 1: not JSON: invalid character '{' after top-level value",
		},
		{
			name:     "blank lines count",
			in:       "\n\n[1, 2]\n",
			wantLine: 3,
			wantErr:  "line 3: not a JSON object: got array",
		},
		{
			name:     "null",
			in:       "null",
			wantLine: 1,
			wantErr:  "line 1: not a JSON object: got null",
		},
		{
			name:     "wrong type",
			in:       `{"iteration":"7"}`,
			wantLine: 1,
			wantErr:  "line 1: field iteration: want integer, got string",
		},
		{
			name:     "fractional iteration",
			in:       `{"iteration":1.5}`,
			wantLine: 1,
			wantErr:  "line 1: field iteration: want integer, got number 1.5",
		},
		{
			name:     "nested wrong type",
			in:       `{"iteration":1,"tool_calls":[{"name":"bash","exit_code":"1"}]}`,
			wantLine: 1,
			wantErr:  "line 1: field tool_calls.exit_code: want integer, got string",
		},
		{
			name:     "tool call without a name",
			in:       good + `{"iteration":4,"tool_calls":[{"name":"bash"},{"args":{}}]}`,
			wantLine: 4,
			wantErr:  "line 4: field tool_calls[1].name: required",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Scan(strings.NewReader(tc.in), &out, stuckdetector.Config{}, nil)
			if err == nil {
				t.Fatalf("Scan succeeded, want %q", tc.wantErr)
			}
			if err.Error() != tc.wantErr {
				t.Errorf("error\n got: %s\nwant: %s", err, tc.wantErr)
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line != tc.wantLine {
				t.Errorf("error %v: want a *LineError for line %d", err, tc.wantLine)
			}
			if out.Len() != 0 {
				t.Errorf("wrote %q for input that failed validation", out.String())
			}
		})
	}
}

func TestScanConfigError(t *testing.T) {
	var out bytes.Buffer
	err := Scan(strings.NewReader(`{"iteration":1}`), &out, stuckdetector.Config{Window: -2}, nil)
	if err == nil || err.Error() != "stuck scan config: Window: must be at least 2 (one iteration holds no repeat), got -2" {
		t.Errorf("Scan with a negative window = %v", err)
	}
	var le *LineError
	if errors.As(err, &le) {
		t.Errorf("a config error is not a line error: %v", err)
	}
}

type failingIO struct{ err error }

func (f failingIO) Read([]byte) (int, error)  { return 0, f.err }
func (f failingIO) Write([]byte) (int, error) { return 0, f.err }

func TestScanIOErrors(t *testing.T) {
	boom := errors.New("boom")
	err := Scan(failingIO{boom}, io.Discard, stuckdetector.Config{}, nil)
	if !errors.Is(err, boom) || err.Error() != "read iteration records: boom" {
		t.Errorf("read failure: %v", err)
	}

	in, err := os.ReadFile(filepath.Join("testdata", "stuck_circular.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	err = Scan(bytes.NewReader(in), failingIO{boom}, stuckdetector.Config{}, nil)
	if !errors.Is(err, boom) || err.Error() != "write signals: boom" {
		t.Errorf("write failure: %v", err)
	}
	// Nothing to write, nothing to fail.
	if err := Scan(strings.NewReader(`{"iteration":1}`), failingIO{boom}, stuckdetector.Config{}, nil); err != nil {
		t.Errorf("no signals but an error: %v", err)
	}
}

func TestScanWindowFlag(t *testing.T) {
	// `ralph stuck scan --window 3`: three quiet iterations are a full window.
	in := `{"iteration":1,"task_id":"T1"}
{"iteration":2,"task_id":"T1"}
{"iteration":3,"task_id":"T1"}
`
	want := `{"iteration":3,"pattern":"no_progress","confidence":0.8,"action":"nudge","strength":"weak",` +
		`"diagnosis":"iterations 1-3 changed no files and reported no workspace hash; no tool calls; evidence weak (3 iterations without progress, threshold 3): a nudge first, decompose_task if it goes on"}` + "\n"
	var out bytes.Buffer
	if err := Scan(strings.NewReader(in), &out, stuckdetector.Config{Window: 3}, nil); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("output\n got: %s\nwant: %s", out.String(), want)
	}
	out.Reset()
	if err := Scan(strings.NewReader(in), &out, stuckdetector.DefaultConfig(), nil); err != nil || out.Len() != 0 {
		t.Errorf("default window: %v, %q; want no signal", err, out.String())
	}
}

// A diagnosis quotes the model's calls; the C1 controls and the direction
// overrides in them are printed escaped, and the JSON still decodes to
// what the detector said.
func TestScanEscapesWhatTheDiagnosisQuotes(t *testing.T) {
	rec := `{"iteration": %d, "task_id": "T1", "workspace_hash": "h", "tool_calls": [{"name": "read_file", "args": {"path": "a\u009b2J\u202e.txt"}, "output": "x"}]}` + "\n"
	var in strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&in, rec, i)
	}
	var out bytes.Buffer
	if err := Scan(strings.NewReader(in.String()), &out, stuckdetector.DefaultConfig(), stuckdetector.DefaultPatterns()); err != nil {
		t.Fatal(err)
	}
	if out.Len() == 0 {
		t.Fatal("no signal")
	}
	if strings.ContainsAny(out.String(), "\u009b\u202e") {
		t.Fatalf("raw controls printed: %q", out.String())
	}
	var sig struct{ Diagnosis string }
	if err := json.Unmarshal(bytes.Split(out.Bytes(), []byte("\n"))[0], &sig); err != nil || !strings.Contains(sig.Diagnosis, "a\u009b2J\u202e.txt") {
		t.Fatalf("decoded %q, %v", sig.Diagnosis, err)
	}
}
