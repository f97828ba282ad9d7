package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
)

// The phases of a session in which the builder waits for another service's
// answer. They are the values of services/builder.Phase (the builder owns
// the state and its phases; pkg/store's tests hold the two together).
const (
	PhaseAnalyzing   = "analyzing"
	PhaseReviewing   = "reviewing"
	PhasePruning     = "pruning"
	PhaseDecomposing = "decomposing"
	PhaseCompacting  = "compacting"
)

// TaskDone is the status of a task the reviewer approved (the value of
// services/builder.TaskDone).
const TaskDone = "done"

// ErrNotAwaited: the session exists but is not waiting for the answer to
// this request (another phase, step or task). The request is a late
// redelivery of one already answered, or forged.
var ErrNotAwaited = errors.New("not awaited by the session")

// SessionView is the part of a session's state (services/builder.State,
// which writes it) that the other services act on: where the loop is and
// the task graph. It is read-only: only the builder saves the state. The
// services take what to do (the task, its verify command, the workspace)
// from here, never from an event's payload, which any client able to
// publish could have written.
type SessionView struct {
	Session   string        `json:"session"`
	Workspace string        `json:"workspace"`
	Limits    events.Limits `json:"limits"`
	Tasks     []TaskView    `json:"tasks"`
	Current   int           `json:"current"`
	Phase     string        `json:"phase"`
	Step      int           `json:"step"`
	// Signal is the stuck signal an intervention in flight answers.
	Signal *events.Signal `json:"signal,omitempty"`
}

// TaskView is one task of the session's task graph as the builder keeps it.
type TaskView struct {
	prd.Task
	Status        string   `json:"status"`
	Turns         int      `json:"turns"`
	Attempts      int      `json:"attempts"`
	Interventions []string `json:"interventions,omitempty"`
	FilesChanged  []string `json:"files_changed,omitempty"`
	Summary       string   `json:"summary,omitempty"`
	Depth         int      `json:"depth,omitempty"`
	Subtasks      []string `json:"subtasks,omitempty"`
	// Base is the commit the task began at, on a session with a branch:
	// the critic reviews base..work tree.
	Base string `json:"base,omitempty"`
}

// Task is the task with id, nil when the session has none.
func (v SessionView) Task(id string) *TaskView {
	for i := range v.Tasks {
		if v.Tasks[i].ID == id {
			return &v.Tasks[i]
		}
	}
	return nil
}

// CurrentTask is the task being worked on, nil when there is none.
func (v SessionView) CurrentTask() *TaskView {
	if v.Current < 0 || v.Current >= len(v.Tasks) {
		return nil
	}
	return &v.Tasks[v.Current]
}

// TaskIDs are the ids of every task of the session, in order.
func (v SessionView) TaskIDs() []string {
	ids := make([]string, len(v.Tasks))
	for i, t := range v.Tasks {
		ids[i] = t.ID
	}
	return ids
}

// Awaits checks that the session waits, in phase, for the answer to the
// request made at step for task (the request's envelope step and task),
// and returns that task. Anything else is an error wrapping ErrNotAwaited
// that says where the session is.
func (v SessionView) Awaits(phase string, step int, task string) (*TaskView, error) {
	cur := v.CurrentTask()
	curID := ""
	if cur != nil {
		curID = cur.ID
	}
	if v.Phase != phase || v.Step != step || cur == nil || curID != task {
		return nil, fmt.Errorf("session %s is %s at step %d on task %q, not %s at step %d on task %q: %w",
			v.Session, v.Phase, v.Step, curID, phase, step, task, ErrNotAwaited)
	}
	return cur, nil
}

// Session reads the view of a session's state; an error wrapping
// ErrNotFound when the session has no state.
func (s *Store) Session(ctx context.Context, session string) (SessionView, error) {
	var v SessionView
	if _, err := s.LoadState(ctx, session, &v); err != nil {
		return SessionView{}, err
	}
	return v, nil
}

// Awaiting reads the view of env's session and checks that the session
// waits, in phase, for the answer to env (Awaits with env's step and
// task). The error wraps ErrNotFound for a session without state and
// ErrNotAwaited for a request the session does not wait for: both mean the
// event must be ignored (Ignorable), never acted on.
func (s *Store) Awaiting(ctx context.Context, env events.Envelope, phase string) (SessionView, *TaskView, error) {
	v, err := s.Session(ctx, env.Session)
	if err != nil {
		return SessionView{}, nil, err
	}
	t, err := v.Awaits(phase, env.Step, env.Task)
	if err != nil {
		return v, nil, err
	}
	return v, t, nil
}

// Ignorable reports whether err from Awaiting means the event is not for a
// session that waits for it (no such session, or not at this step): the
// handler acks it without doing anything. Other errors (Redis down) are
// worth a retry.
func Ignorable(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotAwaited)
}
