package builder

import (
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// This file holds the inputs by which a session is stopped from outside
// its loop: a person cancelling it, and the team's limits.

// Cancel is a person's request to stop the session (cancel.requested at
// step Step). The session stops where it is, whatever it waited for: the
// step in flight, if any, finishes or stops between two tool calls, and its
// answer is then stale (the phase is no longer the one it answers), so no
// half of it is applied. A cancelled session can be resumed.
type Cancel struct {
	Step   int
	Reason string
}

// LimitHit is a limit outside the session's own (the team's tokens of the
// day) that stops the session before step Step runs.
type LimitHit struct {
	Step   int
	Reason string
}

func (Cancel) isInput()   {}
func (LimitHit) isInput() {}

// DefaultCancelReason is the reason of a cancel that gives none.
const DefaultCancelReason = "cancelled by a person"

// cancel stops a session that is running or paused. A session that
// completed, failed or was cancelled already has nothing to stop.
func (s *State) cancel(ev Cancel, now time.Time) ([]Command, error) {
	if s.Phase == PhaseCompleted || s.Phase == PhaseFailed || s.Phase == PhaseCancelled {
		return nil, ErrStale
	}
	reason := ev.Reason
	if reason == "" {
		reason = DefaultCancelReason
	}
	task := ""
	if t := s.CurrentTask(); t != nil {
		task = t.ID
		if t.Status == TaskReview {
			// The review asked for is no longer awaited; a resume sends
			// the task back to the builder, which claims it done again.
			t.Status = TaskActive
		}
	}
	s.Phase = PhaseCancelled
	s.Reason = reason
	s.Signal = nil
	return []Command{s.publish(events.SessionCancelled, events.SessionCancelledData{
		Reason: reason, TaskID: task, Iterations: s.Iteration, Tokens: s.Tokens,
	}, now)}, nil
}

// limitHit fails the session with the limit's reason before its step Step
// runs.
func (s *State) limitHit(ev LimitHit, now time.Time) ([]Command, error) {
	if s.Done() || ev.Step != s.Step {
		return nil, ErrStale
	}
	return s.fail(ev.Reason, now)
}
