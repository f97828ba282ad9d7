package pruner

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tokens"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// TestChunksPointToOversizedUnits: a removed unit larger than a chunk is
// stored whole and shown by the mesh's one artifact pointer, which the
// model can follow back to all of it; smaller units are shown whole.
func TestChunksPointToOversizedUnits(t *testing.T) {
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
	s := New(Deps{Store: st, Tokens: tok, Config: Config{ChunkTokens: 200}})

	big := strings.Repeat("2026-11-02 12:00:00 worker-1 processed batch 7 in 131 ms\n", 60)
	removed := []units.Unit{
		{ID: "tool-3-0", Role: "tool", Kind: units.KindToolResult, Tool: tools.Run, Content: big, Tokens: tok.Count(big)},
		{ID: "assistant-4", Role: "assistant", Kind: units.KindMessage, Content: "Reading the config next.", Tokens: 6},
	}
	chunks, err := s.chunks(ctx, "s1", removed)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(chunks, "")
	id, err := st.PutArtifact(ctx, "s1", big) // content-addressed: the id the pruner got
	if err != nil {
		t.Fatal(err)
	}
	want := tools.ArtifactPointer(fmt.Sprintf("tool tool-3-0: %d tokens, too large to show here", removed[0].Tokens), id) + "\n"
	if !strings.HasPrefix(text, want) {
		t.Errorf("chunks do not start with the artifact pointer\n got: %.300s\nwant: %s", text, want)
	}
	if strings.Contains(text, "processed batch") {
		t.Error("the oversized unit's text is in the chunks")
	}
	if !strings.Contains(text, "Reading the config next.") {
		t.Errorf("the small unit is not shown whole:\n%s", text)
	}
	if got, err := st.GetArtifact(ctx, "s1", id); err != nil || got != big {
		t.Errorf("artifact %s = %d bytes, %v; want the whole unit", id, len(got), err)
	}
}
