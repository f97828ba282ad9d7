package compactbench

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/ralphmesh/ralph/pkg/tokens"
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

func ids(us []units.Unit) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.ID
	}
	return out
}
