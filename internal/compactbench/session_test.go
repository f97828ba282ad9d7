package compactbench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/ralphmesh/ralph/pkg/tokens"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// counter is shared: building one takes a few hundred milliseconds.
var counter = sync.OnceValues(tokens.New)

func session(t *testing.T) Session {
	t.Helper()
	c, err := counter()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Generate(c.Count)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCompactBenchGeneratesSession(t *testing.T) {
	s := session(t)
	if n := len(s.Iterations); n < 60 {
		t.Fatalf("%d iterations, want at least 60", n)
	}
	if again := session(t); !reflect.DeepEqual(s, again) {
		t.Fatal("two sessions differ: the generator is not deterministic")
	}
	if s.Initial[0].ID != "system-T1" || s.Initial[1].ID != "task-T1" || len(s.Initial) != 2 {
		t.Fatalf("initial context: %v", ids(s.Initial))
	}
	c, _ := counter()
	profiles := map[string]bool{}
	finalWritten := false
	for k, it := range s.Iterations {
		step := k + 1
		if it.Step != step || it.Units[0].ID != fmt.Sprintf("assistant-%d", step) {
			t.Fatalf("iteration %d: step %d, first unit %s", step, it.Step, it.Units[0].ID)
		}
		if it.Done() != (k == len(s.Iterations)-1) {
			t.Fatalf("iteration %d: done %v; only the last step may end the session", step, it.Done())
		}
		msg := it.Units[0]
		want := c.Count(msg.Content)
		for _, call := range msg.Calls {
			want += c.Count(call.Name) + c.Count(call.Args)
			var a map[string]string
			if json.Unmarshal([]byte(call.Args), &a) == nil && call.Name == "write_file" {
				if strings.HasPrefix(a["path"], "profiles/") {
					profiles[a["path"]] = true
				}
				finalWritten = finalWritten || a["path"] == "final.md"
			}
		}
		if msg.Tokens != want {
			t.Fatalf("%s: %d tokens, the builder counts %d", msg.ID, msg.Tokens, want)
		}
		if len(it.Units) != len(msg.Calls)+1 {
			t.Fatalf("%s: %d calls but %d results", msg.ID, len(msg.Calls), len(it.Units)-1)
		}
		for i, r := range it.Units[1:] {
			if r.ID != fmt.Sprintf("tool-%d-%d", step, i) || r.CallID != msg.Calls[i].ID || r.Tool != msg.Calls[i].Name ||
				string(r.Args) != msg.Calls[i].Args || r.Role != "tool" || r.Kind != units.KindToolResult {
				t.Fatalf("result %d of %s does not match its call: %+v", i, msg.ID, r)
			}
			if r.Turn != step || r.Tokens != c.Count(r.Content) {
				t.Fatalf("%s: turn %d, %d tokens", r.ID, r.Turn, r.Tokens)
			}
		}
	}
	if len(profiles) != 12 || !finalWritten {
		t.Fatalf("profiles written: %d, final.md written: %v", len(profiles), finalWritten)
	}
	kinds := map[string]int{}
	for _, f := range s.Facts {
		kinds[f.Kind]++
	}
	if kinds[FactInstruction] != 5 || kinds[FactActiveDraft] != 1 || kinds[FactModifiedFile] != 14 || kinds[FactUnresolvedError] != 1 {
		t.Fatalf("facts by kind: %v", kinds)
	}
	// Everything the builder did is still there without compaction.
	var all []units.Unit
	all = append(all, s.Initial...)
	for _, it := range s.Iterations[:len(s.Iterations)-1] {
		all = append(all, it.Units...)
	}
	if lost := CheckFacts(s.Facts, all); len(lost) > 0 {
		t.Fatalf("the uncompacted session lacks facts: %v", lost)
	}
}

// TestCompactBenchToolOutputsMatchPkgTools replays every tool call of the
// session through pkg/tools on a real workspace, the check scripts included
// when the shell tools they use are there: the generated results must be
// byte for byte what the builder would have recorded.
func TestCompactBenchToolOutputsMatchPkgTools(t *testing.T) {
	s := session(t)
	dir := t.TempDir()
	for p, content := range s.Files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := tools.NewWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	exec := tools.NewExecutor(ws, nil, tools.Options{})
	checked := 0
	// The generator simulates the check scripts in Go; the real ones must
	// agree with it.
	probe, err := exec.Execute(context.Background(), "run", `{"command": "command -v grep sed awk wc tr"}`)
	if err != nil {
		t.Fatal(err)
	}
	shell := probe.ExitCode == 0 && probe.Error == ""
	if !shell {
		t.Logf("no shell tools (%q): the check scripts are not compared", probe.Output+probe.Error)
	}
	runs := 0
	for _, it := range s.Iterations {
		for i, call := range it.Units[0].Calls {
			if call.Name == "run" {
				if !shell {
					continue
				}
				runs++
			}
			res, err := exec.Execute(context.Background(), call.Name, call.Args)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Output
			if res.Error != "" {
				got += "error: " + res.Error
			}
			if call.Name == "run" {
				got = fmt.Sprintf("exit code %d\n%s", res.ExitCode, got)
			}
			if want := it.Units[1+i].Content; got != want {
				t.Fatalf("step %d %s %s:\npkg/tools: %q\ngenerated: %q", it.Step, call.Name, call.Args, got, want)
			}
			if !reflect.DeepEqual(res.FilesChanged, it.FilesChanged) && len(res.FilesChanged) > 0 {
				t.Fatalf("step %d: files changed %v, generated %v", it.Step, res.FilesChanged, it.FilesChanged)
			}
			checked++
		}
	}
	if checked < 55 || shell && runs != 6 {
		t.Fatalf("only %d calls checked, %d of them runs", checked, runs)
	}
}

func ids(us []units.Unit) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.ID
	}
	return out
}
