package summarizer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tokens"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// TestPointerText: what the summarizer puts in place of a unit says where
// all of it is in the mesh's one pointer form (tools.ArtifactPointer or
// tools.FilePointer), followed by whole lines of the original.
func TestPointerText(t *testing.T) {
	ctx := context.Background()
	rdb, err := store.Connect(ctx, meshtest.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	st := store.New(rdb, meshtest.Prefix(t), time.Hour)
	tok, err := tokens.New()
	if err != nil {
		t.Fatal(err)
	}
	e := &Executor{Artifacts: st, Tokens: tok}

	var log strings.Builder
	for i := range 80 {
		fmt.Fprintf(&log, "worker-%d processed batch %d in %d ms\n", i%4, i, 100+i*7)
	}
	result := units.Unit{ID: "tool-1-0", Role: "tool", Kind: units.KindToolResult, Tool: tools.Run, Content: log.String()}
	result.Tokens = tok.Count(result.Content)
	write := units.Unit{ID: "assistant-2#c2", Role: "assistant", Kind: units.KindToolCall, Tool: tools.WriteFile,
		Args: json.RawMessage(`{"path":"draft.md","content":"# Outage\nBatches slowed on day 3.\n"}`)}
	write.Tokens = tok.Count(string(write.Args))
	id, err := st.PutArtifact(ctx, "s1", result.Content) // content-addressed: the id the executor gets
	if err != nil {
		t.Fatal(err)
	}

	t.Run("artifact pointer", func(t *testing.T) {
		u, err := e.pointer(ctx, "s1", result, compaction.Op{Pointer: "artifact:", OutputTokens: 60})
		if err != nil {
			t.Fatal(err)
		}
		head, digest, _ := strings.Cut(u.Content, "\n")
		if want := tools.ArtifactPointer(fmt.Sprintf("%d tokens replaced by a pointer", result.Tokens), id); head != want {
			t.Errorf("pointer\n got: %s\nwant: %s", head, want)
		}
		if u.Artifact != id {
			t.Errorf("unit's artifact %q, want %q", u.Artifact, id)
		}
		for _, l := range strings.Split(digest, "\n") {
			if l != "" && !strings.HasPrefix(l, "[") && !strings.Contains(log.String(), l+"\n") {
				t.Errorf("digest line %q is not a whole line of the original", l)
			}
		}
	})
	t.Run("file pointer", func(t *testing.T) {
		u, err := e.pointer(ctx, "s1", write, compaction.Op{Pointer: "file:draft.md", OutputTokens: 60})
		if err != nil {
			t.Fatal(err)
		}
		var args struct{ Compacted string }
		if err := json.Unmarshal(u.Args, &args); err != nil {
			t.Fatal(err)
		}
		head, _, _ := strings.Cut(args.Compacted, "\n")
		if want := tools.FilePointer(fmt.Sprintf("%d tokens replaced by a pointer", write.Tokens), "draft.md"); head != want {
			t.Errorf("pointer\n got: %s\nwant: %s", head, want)
		}
	})
	t.Run("rewrite of a stored output", func(t *testing.T) {
		stored := result
		stored.Artifact = id
		u := rewrite(stored, compaction.OpCompactToolOutput, "Batches took 100-650 ms.")
		if want := tools.ArtifactPointer("compacted run output", id) + "\nBatches took 100-650 ms."; u.Content != want {
			t.Errorf("rewrite\n got: %s\nwant: %s", u.Content, want)
		}
		u = rewrite(result, compaction.OpCompactToolOutput, "Batches took 100-650 ms.")
		if want := "[compacted run output]\nBatches took 100-650 ms."; u.Content != want {
			t.Errorf("rewrite without an artifact\n got: %s\nwant: %s", u.Content, want)
		}
	})
}
