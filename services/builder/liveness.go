package builder

import (
	"context"
	"fmt"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// DeadLettered is a stage giving up on an event of the session at step
// Step: the event (of type Type) was dead-lettered for Reason, which says
// who gave up on what and why. The session would wait for ever for the
// answer that event was to bring, so it ends.
type DeadLettered struct {
	Step   int
	Type   events.Type
	Reason string
}

// TimedOut is the watchdog's word that nothing has happened in the session
// for Idle while it waited at step Step.
type TimedOut struct {
	Step int
	Idle time.Duration
}

// Ended records a session.failed that is on the stream but not in the
// state: it was published directly, without the state, while the state
// could not be written (Redis was unreachable past the outage budget).
type Ended struct {
	Step   int
	Reason string
}

func (DeadLettered) isInput() {}
func (TimedOut) isInput()     {}
func (Ended) isInput()        {}

// wait is what a phase waits for: the event in flight to another stage
// (whose loss a person can make good, so it escalates), the builder's own
// input (whose loss fails the session), the event that will end the wait,
// and who sends it.
type wait struct {
	request, input, expect events.Type
	who                    string
}

var waits = map[Phase]wait{
	PhaseIterating:   {"", events.IterationRequested, events.IterationCompleted, "builder"},
	PhaseAnalyzing:   {events.IterationCompleted, events.IterationAnalyzed, events.IterationAnalyzed, "stuck detector"},
	PhaseReviewing:   {events.CritiqueRequested, events.CritiqueCompleted, events.CritiqueCompleted, "critic"},
	PhasePruning:     {events.PruneRequested, events.PruneCompleted, events.PruneCompleted, "pruner"},
	PhaseDecomposing: {events.DecomposeRequested, events.TaskDecomposed, events.TaskDecomposed, "decomposer"},
	PhaseCompacting:  {events.CompactionRequested, events.CompactionCompleted, events.CompactionCompleted, "summarizer"},
	// The commit is the builder's own effect of the critic's approval.
	PhaseCommitting: {"", events.CritiqueCompleted, events.TaskCompleted, "builder"},
}

// deadLettered ends the session whose awaited event was given up on. An
// event of another stage (the critic's request, say) escalates: the work
// so far is intact and a person can resume the task once the stage runs
// again. One of the builder's own inputs fails the session, as its own
// give-up does. An event the session no longer waits for (another step,
// another phase) changes nothing.
func (s *State) deadLettered(ev DeadLettered, now time.Time) ([]Command, error) {
	if s.Phase == PhaseEscalated && ev.Type == events.SessionResumed && ev.Step == s.Step {
		// The resume itself was given up on: `ralph resume` is waiting.
		return s.fail(ev.Reason, now)
	}
	w, ok := waits[s.Phase]
	if !ok || s.Done() || ev.Step != s.Step || (ev.Type != w.request && ev.Type != w.input) {
		return nil, ErrStale
	}
	if ev.Type == w.input || s.CurrentTask() == nil {
		return s.fail(ev.Reason, now)
	}
	s.CurrentTask().Status = TaskActive
	return s.escalate(ev.Reason, nil, now)
}

// timedOut escalates a session nothing has happened in for too long: the
// stage it waits for is not running, or the event was lost. The state is
// intact, so a person starts what is missing and resumes the task.
func (s *State) timedOut(ev TimedOut, now time.Time) ([]Command, error) {
	w, ok := waits[s.Phase]
	if !ok || s.Done() || ev.Step != s.Step {
		return nil, ErrStale
	}
	reason := fmt.Sprintf("no event for %s while waiting for %s at step %d; ", ev.Idle.Round(time.Second), w.expect, s.Step)
	if w.request == "" {
		reason += "the builder's step was lost (a builder replica is running: this is its watchdog)"
	} else {
		reason += fmt.Sprintf("is a %s running?", w.who)
	}
	if s.CurrentTask() == nil {
		return s.fail(reason, now)
	}
	s.CurrentTask().Status = TaskActive
	return s.escalate(reason, nil, now)
}

// WaitingFor is the event the session waits for in its phase, "" when it
// waits for nothing (it is over or paused).
func (s State) WaitingFor() events.Type {
	return waits[s.Phase].expect
}

// ended brings the state in line with the session.failed already on the
// stream and announces the failure again, at the next step (so it is a
// new event, not one the server drops as a duplicate): a follower that
// doubted the first, because the state did not show it, gets one the state
// now confirms.
func (s *State) ended(ev Ended, now time.Time) ([]Command, error) {
	if s.Done() || ev.Step < s.Step {
		return nil, ErrStale
	}
	s.Step = ev.Step + 1
	return s.fail(ev.Reason, now)
}

// StateLoader reads a session's stored state (store.Store's LoadState).
type StateLoader interface {
	LoadState(ctx context.Context, session string, v any) (int64, error)
}

// StoredPhase is the phase and step of session's stored state, for a
// follower that checks an event against it before it reports an outcome.
func StoredPhase(ctx context.Context, st StateLoader, session string) (Phase, int, error) {
	var s State
	if _, err := st.LoadState(ctx, session, &s); err != nil {
		return "", 0, err
	}
	return s.Phase, s.Step, nil
}

// Ends reports whether a session in phase ended with an event of type typ.
func Ends(phase Phase, typ events.Type) bool {
	switch typ {
	case events.SessionCompleted:
		return phase == PhaseCompleted
	case events.SessionFailed:
		return phase == PhaseFailed
	case events.SessionEscalated:
		return phase == PhaseEscalated
	case events.SessionCancelled:
		return phase == PhaseCancelled
	}
	return false
}
