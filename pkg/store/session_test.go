package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/services/builder"
)

// The view's phases are the builder's: a renamed phase would make every
// service ignore the requests it should answer.
func TestSessionViewPhasesAreTheBuilders(t *testing.T) {
	for view, b := range map[string]builder.Phase{
		store.PhaseAnalyzing:   builder.PhaseAnalyzing,
		store.PhaseReviewing:   builder.PhaseReviewing,
		store.PhasePruning:     builder.PhasePruning,
		store.PhaseDecomposing: builder.PhaseDecomposing,
		store.PhaseCompacting:  builder.PhaseCompacting,
	} {
		if view != string(b) {
			t.Errorf("store phase %q, builder phase %q", view, b)
		}
	}
	if store.TaskDone != builder.TaskDone {
		t.Errorf("store's done task %q, builder's %q", store.TaskDone, builder.TaskDone)
	}
}

// Session reads the builder's saved state through the view: every field
// the other services act on survives, so a renamed field in the builder's
// State is a failure here rather than a service acting on zero values.
func TestSessionReadsTheBuildersState(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	p := prd.PRD{Tasks: []prd.Task{
		{ID: "T1", Title: "one", AcceptanceCriteria: []string{"c1"}, Verify: "go test ./..."},
		{ID: "T2", Title: "two", AcceptanceCriteria: []string{"c2"}, DependsOn: []string{"T1"}},
	}}
	now := time.Now()
	st, _ := builder.Start("s1", events.SessionStartedData{PRD: p, Workspace: "/w"}, builder.DefaultConfig().Limits(), now)
	sig := events.Signal{Pattern: "chanting", Confidence: 0.8, Action: events.ActionPrune}
	st.Signal = &sig
	st.Tasks[0].Attempts, st.Tasks[0].Summary, st.Tasks[0].FilesChanged = 2, "done", []string{"a.go"}
	st.Tasks[0].Interventions, st.Tasks[0].Depth, st.Tasks[0].Subtasks = []string{"nudge:x"}, 1, []string{"T1.1"}
	st.Tasks[0].Base = "0123abcd"
	if _, err := e.st.SaveState(ctx, "s1", 0, st); err != nil {
		t.Fatal(err)
	}
	v, err := e.st.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if v.Session != "s1" || v.Workspace != "/w" || v.Limits != st.Limits || v.Current != st.Current ||
		v.Phase != string(st.Phase) || v.Step != st.Step || !reflect.DeepEqual(v.Signal, st.Signal) {
		t.Errorf("view %+v does not hold the state %+v", v, st)
	}
	if len(v.Tasks) != 2 {
		t.Fatalf("view tasks %+v", v.Tasks)
	}
	got, want := v.Tasks[0], st.Tasks[0]
	if !reflect.DeepEqual(got.Task, want.Task) || got.Status != want.Status || got.Turns != want.Turns || got.Attempts != want.Attempts ||
		!reflect.DeepEqual(got.Interventions, want.Interventions) || !reflect.DeepEqual(got.FilesChanged, want.FilesChanged) ||
		got.Summary != want.Summary || got.Depth != want.Depth || !reflect.DeepEqual(got.Subtasks, want.Subtasks) || got.Base != want.Base {
		t.Errorf("view task %+v, state task %+v", got, want)
	}
	if ids := v.TaskIDs(); !reflect.DeepEqual(ids, []string{"T1", "T2"}) {
		t.Errorf("TaskIDs = %v", ids)
	}
	if _, err := e.st.Session(ctx, "ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Session of a session without state: %v, want ErrNotFound", err)
	}
}

// The head the builder stores with its state is the head of the whole
// state: Awaiting, which reads only the head, answers as it would from the
// whole state, on every write path (SaveState and Commit), and a state
// saved without a head (the view itself) is read whole, never with an
// older head left behind.
func TestAwaitingReadsTheHeadStoredWithTheState(t *testing.T) {
	e := newStore(t)
	ctx := context.Background()
	p := prd.PRD{Tasks: []prd.Task{
		{ID: "T1", Title: "one", AcceptanceCriteria: []string{"c1"}, Verify: "go test ./..."},
		{ID: "T2", Title: "two", AcceptanceCriteria: []string{"c2"}, DependsOn: []string{"T1"}},
	}}
	st, _ := builder.Start("s1", events.SessionStartedData{PRD: p, Workspace: "/w"}, builder.DefaultConfig().Limits(), time.Now())
	st.Phase, st.Step, st.Current = builder.PhaseReviewing, 4, 1
	sig := events.Signal{Pattern: "chanting", Confidence: 0.8, Action: events.ActionPrune}
	st.Signal = &sig
	st.Tasks[1].Attempts, st.Tasks[1].Summary, st.Tasks[1].Base = 2, "did it", "0123abcd"
	st.Tasks[1].Interventions, st.Tasks[1].FilesChanged = []string{"nudge:x"}, []string{"a.go"}
	ver, err := e.st.SaveState(ctx, "s1", 0, st)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string, wantTask string) {
		t.Helper()
		whole, err := e.st.Session(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		env := events.Envelope{Session: "s1", Step: whole.Step, Task: wantTask}
		head, task, err := e.st.Awaiting(ctx, env, whole.Phase)
		if err != nil {
			t.Fatalf("%s: Awaiting: %v", when, err)
		}
		if want := whole.Head(); !reflect.DeepEqual(head, want) {
			t.Errorf("%s: head\n%+v\nwant the whole state's\n%+v", when, head, want)
		}
		if task == nil || task.ID != wantTask || !reflect.DeepEqual(*task, *whole.CurrentTask()) {
			t.Errorf("%s: task %+v, want %+v", when, task, whole.CurrentTask())
		}
	}
	stored := func() bool {
		n, err := e.rdb.HExists(ctx, e.prefix+":{s1}:state", "head").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	check("after SaveState", "T2")
	if !stored() {
		t.Fatal("no head stored with the builder's state")
	}

	st.Current, st.Step, st.Phase, st.Signal = 0, 5, builder.PhaseAnalyzing, nil
	if _, err := e.st.Commit(ctx, store.Commit{Session: "s1", Expect: ver, State: st, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	check("after Commit", "T1")

	// A builder of an earlier release (a rolling upgrade) saves the state
	// without touching the head: the head left behind is older than the
	// state, and the state is read whole.
	st.Step = 9
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(ctx, e.prefix+":{s1}:state", "version", ver+2, "data", data).Err(); err != nil {
		t.Fatal(err)
	}
	check("after a save that left the head behind", "T1")
	ver++

	view, err := e.st.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	view.Step = 6
	if _, err := e.st.SaveState(ctx, "s1", ver+1, view); err != nil {
		t.Fatal(err)
	}
	if stored() {
		t.Fatal("a state saved without a head kept the older head")
	}
	check("after a state without a head", "T1")

	if _, _, err := e.st.Awaiting(ctx, events.Envelope{Session: "ghost"}, store.PhaseAnalyzing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Awaiting for a session without state: %v, want ErrNotFound", err)
	}
}

func TestAwaits(t *testing.T) {
	v := store.SessionView{Session: "s1", Phase: store.PhaseReviewing, Step: 3, Current: 1,
		Tasks: []store.TaskView{{Task: prd.Task{ID: "T1"}}, {Task: prd.Task{ID: "T2"}}}}
	cases := []struct {
		name  string
		view  store.SessionView
		phase string
		step  int
		task  string
		ok    bool
	}{
		{"awaited", v, store.PhaseReviewing, 3, "T2", true},
		{"another phase", v, store.PhasePruning, 3, "T2", false},
		{"an earlier step", v, store.PhaseReviewing, 2, "T2", false},
		{"a later step", v, store.PhaseReviewing, 4, "T2", false},
		{"another task", v, store.PhaseReviewing, 3, "T1", false},
		{"no current task", store.SessionView{Phase: store.PhaseReviewing, Step: 3, Current: -1}, store.PhaseReviewing, 3, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task, err := c.view.Awaits(c.phase, c.step, c.task)
			if c.ok {
				if err != nil || task == nil || task.ID != c.task {
					t.Errorf("Awaits = %v, %v; want task %s", task, err, c.task)
				}
				return
			}
			if !errors.Is(err, store.ErrNotAwaited) || !store.Ignorable(err) || task != nil {
				t.Errorf("Awaits = %v, %v; want ErrNotAwaited", task, err)
			}
		})
	}
	if store.Ignorable(errors.New("redis: connection refused")) {
		t.Error("a Redis failure is not ignorable: the event must be retried")
	}
}

func TestSessionViewTask(t *testing.T) {
	v := store.SessionView{Tasks: []store.TaskView{{Task: prd.Task{ID: "T1"}}, {Task: prd.Task{ID: "T2"}, Status: store.TaskDone}}}
	if got := v.Task("T2"); got == nil || got.Status != store.TaskDone {
		t.Errorf("Task(T2) = %+v", got)
	}
	if got := v.Task("T9"); got != nil {
		t.Errorf("Task(T9) = %+v, want nil", got)
	}
}
