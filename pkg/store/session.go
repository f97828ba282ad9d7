package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

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
	return v.Head().Awaits(phase, step, task)
}

// Head is what a service reads of a session on every request it serves:
// where the loop is, the current task and the ids of the others. The
// builder writes it with every state (the "head" field of the state's
// hash, see Headed), so that checking a request does not decode the whole
// task graph, which grows with the session.
type Head struct {
	Session   string        `json:"session"`
	Workspace string        `json:"workspace"`
	Limits    events.Limits `json:"limits"`
	Phase     string        `json:"phase"`
	Step      int           `json:"step"`
	// Signal is the stuck signal an intervention in flight answers.
	Signal *events.Signal `json:"signal,omitempty"`
	// Task is the task being worked on, nil when there is none.
	Task *TaskView `json:"task,omitempty"`
	// TaskIDs are the ids of every task of the session, in order.
	TaskIDs []string `json:"task_ids"`
	// Version is the version of the state the head was stored with: the
	// store reads a head only when it is the state's own, and hands it on
	// with 0 here.
	Version int64 `json:"version,omitempty"`
}

// Headed is a state that says its head: SaveState and Commit write it
// beside the state. A state that does not (a test's SessionView) has no
// head stored, and Awaiting reads the whole state instead.
type Headed interface {
	SessionHead() Head
}

// Head is v's head.
func (v SessionView) Head() Head {
	h := Head{Session: v.Session, Workspace: v.Workspace, Limits: v.Limits, Phase: v.Phase, Step: v.Step,
		Signal: v.Signal, TaskIDs: v.TaskIDs()}
	if cur := v.CurrentTask(); cur != nil {
		t := *cur
		h.Task = &t
	}
	return h
}

// Awaits is SessionView.Awaits on the head.
func (h Head) Awaits(phase string, step int, task string) (*TaskView, error) {
	curID := ""
	if h.Task != nil {
		curID = h.Task.ID
	}
	if h.Phase != phase || h.Step != step || h.Task == nil || curID != task {
		return nil, fmt.Errorf("session %s is %s at step %d on task %q, not %s at step %d on task %q: %w",
			h.Session, h.Phase, h.Step, curID, phase, step, task, ErrNotAwaited)
	}
	return h.Task, nil
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

// Awaiting reads the head of env's session and checks that the session
// waits, in phase, for the answer to env (Awaits with env's step and
// task). The error wraps ErrNotFound for a session without state and
// ErrNotAwaited for a request the session does not wait for: both mean the
// event must be ignored (Ignorable), never acted on.
func (s *Store) Awaiting(ctx context.Context, env events.Envelope, phase string) (Head, *TaskView, error) {
	h, err := s.head(ctx, env.Session)
	if err != nil {
		return Head{}, nil, err
	}
	t, err := h.Awaits(phase, env.Step, env.Task)
	if err != nil {
		return h, nil, err
	}
	return h, t, nil
}

// head reads a session's head: one round trip, the whole state read only
// when no head was stored with it.
func (s *Store) head(ctx context.Context, session string) (Head, error) {
	res, err := s.rdb.HMGet(ctx, s.key(session, "state"), "version", "head").Result()
	if err != nil {
		return Head{}, fmt.Errorf("load session %s: redis: %w", session, unavailable(err))
	}
	if res[0] == nil {
		return Head{}, fmt.Errorf("load session %s: %w", session, ErrNotFound)
	}
	var h Head
	if raw, ok := res[1].(string); ok {
		if err := json.Unmarshal([]byte(raw), &h); err != nil {
			return Head{}, fmt.Errorf("load session %s: decode head: %w", session, err)
		}
		if strconv.FormatInt(h.Version, 10) == res[0] {
			h.Version = 0
			return h, nil
		}
	}
	// No head, or one older than the state: the state, read whole.
	v, err := s.Session(ctx, session)
	return v.Head(), err
}

// Ignorable reports whether err from Awaiting means the event is not for a
// session that waits for it (no such session, or not at this step): the
// handler acks it without doing anything. Other errors (Redis down) are
// worth a retry.
func Ignorable(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotAwaited)
}
