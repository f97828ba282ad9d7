package builder

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// TestWorkspaceHashSkipsAStepThatChangedNothing writes a file behind the
// steps' back to see which of them walked the workspace: a step that ran no
// command and wrote nothing carries the digest of the step before of the
// same attempt at the task; any other step gets Hash's digest of the tree,
// with the hasher watching for changes or not.
func TestWorkspaceHashSkipsAStepThatChangedNothing(t *testing.T) {
	for _, watch := range []bool{false, true} {
		t.Run(map[bool]string{false: "stat walk", true: "watched"}[watch], func(t *testing.T) {
			testWorkspaceHash(t, watch)
		})
	}
}

func testWorkspaceHash(t *testing.T, watch bool) {
	s := New(Deps{Log: zap.NewNop()})
	if watch {
		if err := s.hasher.WatchChanges(); err != nil {
			t.Fatal(err)
		}
		defer s.hasher.Close()
	}
	root := t.TempDir()
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	attempt := 0
	hash := func(task string, step int, names ...string) string {
		t.Helper()
		var calls []units.Call
		for _, n := range names {
			calls = append(calls, units.Call{Name: n})
		}
		d, err := s.workspaceHash(root, "s-1", task, attempt, step, calls)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	fresh := func() string {
		t.Helper()
		d, err := tools.Hash(root)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	write("a")
	first := hash("T1", 1, tools.WriteFile)
	if first != fresh() {
		t.Fatal("a step that wrote: not Hash's digest")
	}
	write("b")
	if got := hash("T1", 2, tools.ReadFile, tools.ListDir, tools.Search); got != first {
		t.Error("a step that only read walked the workspace")
	}
	if got := hash("T1", 3); got != first {
		t.Error("a step without tool calls walked the workspace")
	}
	for i, tool := range []string{tools.Run, tools.EditFile, tools.WriteFile} {
		write(tool)
		if got := hash("T1", 4+i, tools.ReadFile, tool); got != fresh() {
			t.Errorf("a step that called %s: not Hash's digest", tool)
		}
	}
	write("c")
	if got := hash("T1", 9, tools.ReadFile); got != fresh() {
		t.Error("a step after a gap in the steps carried a digest it could not vouch for")
	}
	write("d")
	if got := hash("T2", 10, tools.ReadFile); got != fresh() {
		t.Error("the first step of another task carried the digest of the task before")
	}
	// A review ran between steps 10 and 11: its verify command may have
	// written, on another host too.
	write("e")
	attempt++
	if got := hash("T2", 11, tools.ReadFile); got != fresh() {
		t.Error("the first step of a new attempt carried the digest of the attempt before")
	}
	write("f")
	if got := hash("T2", 12, tools.Run); got != fresh() {
		t.Error("a step that ran a command: not Hash's digest")
	}
}
