package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ralphmesh/ralph/pkg/store"
)

type memoryRecord struct {
	Text  string   `json:"text"`
	Tasks []string `json:"tasks"`
}

func TestMemoryCompareAndSet(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	got := memoryRecord{Text: "untouched"}
	if ver, err := e.st.LoadMemory(ctx, "s1", &got); err != nil || ver != 0 || got.Text != "untouched" {
		t.Fatalf("LoadMemory before any = %d %+v %v, want version 0 and v untouched", ver, got, err)
	}
	v1, err := e.st.SaveMemory(ctx, "s1", 0, memoryRecord{Text: "T1 learned", Tasks: []string{"T1"}})
	if err != nil || v1 != 1 {
		t.Fatalf("SaveMemory(0) = %d %v", v1, err)
	}
	// A writer that read before T1 was stored loses, and says so.
	if _, err := e.st.SaveMemory(ctx, "s1", 0, memoryRecord{Text: "T2 alone", Tasks: []string{"T2"}}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("SaveMemory(0) at version 1: %v, want ErrConflict", err)
	}
	if _, err := e.st.SaveMemory(ctx, "s1", v1, memoryRecord{Text: "T1 and T2", Tasks: []string{"T1", "T2"}}); err != nil {
		t.Fatal(err)
	}
	ver, err := e.st.LoadMemory(ctx, "s1", &got)
	if err != nil || ver != 2 || got.Text != "T1 and T2" || len(got.Tasks) != 2 {
		t.Errorf("LoadMemory = %d %+v %v", ver, got, err)
	}
	// The state's key is another: a session's memory is not its state.
	var st state
	if _, err := e.st.LoadState(ctx, "s1", &st); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadState after SaveMemory: %v, want ErrNotFound", err)
	}
	ttl, err := e.rdb.TTL(ctx, e.prefix+":{s1}:memory").Result()
	if err != nil || ttl <= 0 || ttl > testTTL {
		t.Errorf("memory key TTL = %v (%v), want in (0, %v]", ttl, err, testTTL)
	}
}
