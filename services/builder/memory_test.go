package builder

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/units"
)

// approveFirst drives a three-task session to T1's approval and returns
// the commands that start T2.
func approveFirst(t *testing.T) (State, []Command) {
	t.Helper()
	start := twoTasks()
	start.PRD.Tasks = append(start.PRD.Tasks, start.PRD.Tasks[1])
	start.PRD.Tasks[2].ID, start.PRD.Tasks[2].DependsOn = "T3", []string{"T2"}
	s, _ := Start("s1", start, defaults, t0)
	s, _ = step(t, s, record(s, 100, claimed))
	s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}})
	return step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: "T1", Verdict: events.Verdict{Approved: true}}})
}

func memoryRequest(cmds []Command) *MemoryRequest {
	for _, c := range cmds {
		if c.Append != nil {
			return c.Append.Memory
		}
	}
	return nil
}

// Every task's first units ask for the session's memory, naming the tasks
// approved before it; the machine itself reads nothing.
func TestATaskStartAsksForTheMemoryOfTheTasksBefore(t *testing.T) {
	_, first := Start("s1", twoTasks(), defaults, t0)
	if req := memoryRequest(first); req == nil || len(req.After) != 0 {
		t.Errorf("first task's memory request %+v, want one after no task", req)
	}
	_, cmds := approveFirst(t)
	if req := memoryRequest(cmds); req == nil || !eq(req.After, []string{"T1"}) {
		t.Errorf("T2's memory request %+v, want after [T1]", req)
	}
}

// shellStore is the test Redis, telling the test when a memory read
// returns.
type shellStore struct {
	*store.Store
	once  sync.Once
	first chan struct{}
}

func (s *shellStore) LoadMemory(ctx context.Context, session string, v any) (int64, error) {
	ver, err := s.Store.LoadMemory(ctx, session, v)
	s.once.Do(func() { close(s.first) })
	return ver, err
}

type quietBus struct{ published []events.Envelope }

func (b *quietBus) Publish(_ context.Context, env events.Envelope) error {
	b.published = append(b.published, env)
	return nil
}
func (b *quietBus) Run(context.Context, string, map[events.Type]bus.Handler, bus.RunOptions) error {
	return nil
}
func (b *quietBus) MaxPayload() int64 { return 1 << 20 }
func (b *quietBus) RunDeadLetters(context.Context, string, func(context.Context, bus.DeadLetter) error, bus.RunOptions) error {
	return nil
}
func (b *quietBus) LastEvent(context.Context, string, events.Type) (events.Envelope, bool, error) {
	return events.Envelope{}, false, nil
}

func shell(t *testing.T, mc memory.Config) (*Service, *shellStore) {
	t.Helper()
	rdb, err := store.Connect(context.Background(), meshtest.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	st := &shellStore{Store: store.New(rdb, meshtest.Prefix(t), time.Hour), first: make(chan struct{})}
	return New(Deps{Bus: &quietBus{}, Store: st, Tokens: byteTokens{}, Log: zap.NewNop(), Config: Config{Memory: mc}}), st
}

func memoryOn(wait time.Duration) memory.Config {
	c := memory.DefaultConfig()
	c.MemoryWait = wait
	return c
}

func contextOf(t *testing.T, st *shellStore, task string) []units.Unit {
	t.Helper()
	us, err := st.Units(context.Background(), "s1", task)
	if err != nil {
		t.Fatal(err)
	}
	return us
}

func saveMemory(t *testing.T, st *shellStore, expect int64, text string, tasks ...string) {
	t.Helper()
	if _, err := st.SaveMemory(context.Background(), "s1", expect, memory.Memory{Text: text, Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
}

// The shell waits for the memory to hold T1 before T2 starts: the memory
// read first (without T1) is not the one T2 gets, the one saved after it
// is, after T2's instructions and in its stable head.
func TestTheShellWaitsForTheMemoryOfTheTaskJustApproved(t *testing.T) {
	svc, st := shell(t, memoryOn(time.Minute))
	saveMemory(t, st, 0, "## Critical Context\n- [T0] stale")
	_, cmds := approveFirst(t)
	done := make(chan error, 1)
	go func() { done <- svc.execute(context.Background(), cmds) }()
	select {
	case <-st.first:
	case err := <-done:
		t.Fatalf("T2 started (%v) without reading the memory", err)
	}
	saveMemory(t, st, 1, "## Critical Context\n- [T1] the tests need FOO=1", "T1")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	us := contextOf(t, st, "T2")
	ids := make([]string, len(us))
	for i, u := range us {
		ids[i] = u.ID
	}
	if !eq(ids, []string{"system-T2", "task-T2", compaction.MemoryUnitID("T2")}) {
		t.Fatalf("T2 starts with %v", ids)
	}
	mem := us[2]
	if !strings.Contains(mem.Content, "[T1] the tests need FOO=1") || strings.Contains(mem.Content, "stale") || mem.Tokens == 0 {
		t.Errorf("T2's memory unit is %q (%d tokens), want the memory that holds T1", mem.Content, mem.Tokens)
	}
	if compaction.StableHead(us) != 3 {
		t.Errorf("the memory is not in T2's stable head")
	}
}

// Past the wait, a task starts with the memory as it stands; with memory
// off, or an empty memory, it gets none.
func TestTheShellTakesTheMemoryAsItStands(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mc     memory.Config
		memory string
		want   string
	}{
		{"not ready within the wait", memoryOn(0), "## Critical Context\n- [T0] older", "[T0] older"},
		{"memory off", memory.Config{}, "## Critical Context\n- [T0] older", ""},
		{"nothing learned yet", memoryOn(0), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, st := shell(t, tc.mc)
			saveMemory(t, st, 0, tc.memory)
			_, cmds := approveFirst(t)
			if err := svc.execute(context.Background(), cmds); err != nil {
				t.Fatal(err)
			}
			us := contextOf(t, st, "T2")
			var got string
			for _, u := range us {
				if compaction.IsMemoryUnit(u) {
					got = u.Content
				}
			}
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("memory unit %q, want one with %q", got, tc.want)
			}
		})
	}
}

// A task whose instructions fit only without the memory is refused when
// memory is on: every first request must hold the memory at its bound.
func TestFitKeepsRoomForTheMemory(t *testing.T) {
	m := Measurer(byteTokens{}, 100)
	mc := memory.DefaultConfig()
	room := MemoryRoom(byteTokens{}, mc)
	if room <= mc.MemoryMaxTokens || MemoryRoom(byteTokens{}, memory.Config{}) != 0 {
		t.Fatalf("room %d for a bound of %d; off: %d", room, mc.MemoryMaxTokens, MemoryRoom(byteTokens{}, memory.Config{}))
	}
	s, _ := Start("s1", twoTasks(), defaults, t0)
	without := m(s.instructions(s.Tasks[0])).Total()
	s.Limits.ContextWindow = without + room/2
	if reason := s.Unfit(m); reason != "" {
		t.Fatalf("refused without memory: %s", reason)
	}
	reason := s.Unfit(m.WithMemory(room))
	if !strings.Contains(reason, "cannot start") || !strings.Contains(reason, "memory up to") {
		t.Errorf("with memory: %q, want a refusal that names the memory", reason)
	}
}
