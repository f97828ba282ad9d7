package builder

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// reviewing is a session whose first task waits for the critic at step 2.
func reviewing(t *testing.T) State {
	t.Helper()
	s, _ := Start("s1", twoTasks(), defaults, t0)
	s, _ = step(t, s, record(s, 10, claimed))
	s, _ = step(t, s, Analyzed{Step: s.Step, Data: events.IterationAnalyzedData{ClaimedDone: true}})
	if s.Phase != PhaseReviewing || s.Step != 1 {
		t.Fatalf("setup: phase %s step %d", s.Phase, s.Step)
	}
	return s
}

func TestDeadLetteredEndsTheSession(t *testing.T) {
	iterating, _ := Start("s1", twoTasks(), defaults, t0)
	analyzing, _ := step(t, iterating, record(iterating, 10))
	cases := []struct {
		name  string
		s     State
		typ   events.Type
		phase Phase
		event events.Type
	}{
		{"the builder's own step", iterating, events.IterationRequested, PhaseFailed, events.SessionFailed},
		{"the stuck detector's input", analyzing, events.IterationCompleted, PhaseEscalated, events.SessionEscalated},
		{"the builder's answer to the detector", analyzing, events.IterationAnalyzed, PhaseFailed, events.SessionFailed},
		{"the critic's request", reviewing(t), events.CritiqueRequested, PhaseEscalated, events.SessionEscalated},
		{"the critic's verdict", reviewing(t), events.CritiqueCompleted, PhaseFailed, events.SessionFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reason := "critic gave up on " + string(c.typ) + " at step 1 after 5 deliveries: boom"
			next, cmds := step(t, c.s, DeadLettered{Step: c.s.Step, Type: c.typ, Reason: reason})
			if next.Phase != c.phase || next.Reason != reason {
				t.Fatalf("phase %s reason %q; want %s with the reason", next.Phase, next.Reason, c.phase)
			}
			if got := published(cmds); !eq(got, []events.Type{c.event}) {
				t.Fatalf("published %v, want %s", got, c.event)
			}
			if c.phase == PhaseEscalated {
				if d := payload[events.SessionEscalatedData](t, cmds, events.SessionEscalated); d.Reason != reason || d.TaskID != "T1" {
					t.Fatalf("escalation %+v", d)
				}
				if next.CurrentTask().Status != TaskActive {
					t.Fatalf("escalated task is %s; a resume must find it active", next.CurrentTask().Status)
				}
				// A person's guidance resumes it.
				if resumed, _ := step(t, next, Resumed{Step: next.Step, Data: events.SessionResumedData{Message: "go on"}}); resumed.Phase != PhaseIterating {
					t.Fatalf("after a resume: phase %s", resumed.Phase)
				}
			} else if d := payload[events.SessionFailedData](t, cmds, events.SessionFailed); d.Reason != reason {
				t.Fatalf("failure %+v", d)
			}
		})
	}
}

func TestDeadLetteredWhatIsNotAwaitedChangesNothing(t *testing.T) {
	s := reviewing(t)
	done := s
	done.Phase = PhaseCompleted
	for name, c := range map[string]struct {
		s  State
		in DeadLettered
	}{
		"another step":              {s, DeadLettered{Step: s.Step - 1, Type: events.CritiqueRequested}},
		"another phase's event":     {s, DeadLettered{Step: s.Step, Type: events.PruneRequested}},
		"an event nobody waits for": {s, DeadLettered{Step: s.Step, Type: events.TaskStarted}},
		"a session that is over":    {done, DeadLettered{Step: s.Step, Type: events.CritiqueRequested}},
	} {
		t.Run(name, func(t *testing.T) {
			next, cmds, err := Next(c.s, c.in, t0)
			if !errors.Is(err, ErrStale) || cmds != nil || next.Phase != c.s.Phase {
				t.Fatalf("err %v, cmds %v, phase %s", err, cmds, next.Phase)
			}
		})
	}
}

func TestDeadLetteredResumeFails(t *testing.T) {
	s := reviewing(t)
	s, _ = step(t, s, Critiqued{Step: s.Step, Data: events.CritiqueCompletedData{TaskID: "T1", Error: "critic down"}})
	if s.Phase != PhaseEscalated {
		t.Fatalf("setup: %s", s.Phase)
	}
	next, cmds := step(t, s, DeadLettered{Step: s.Step, Type: events.SessionResumed, Reason: "builder gave up on session.resumed"})
	if next.Phase != PhaseFailed || !eq(published(cmds), []events.Type{events.SessionFailed}) {
		t.Fatalf("a resume given up on: phase %s, published %v; want failed (ralph resume waits for it)", next.Phase, published(cmds))
	}
}

func TestTimedOutEscalatesWithWhatItWaitedFor(t *testing.T) {
	iterating, _ := Start("s1", twoTasks(), defaults, t0)
	for name, c := range map[string]struct {
		s    State
		want string
	}{
		"reviewing": {reviewing(t), "no event for 15m0s while waiting for critique.completed at step 1; is a critic running?"},
		"iterating": {iterating, "no event for 15m0s while waiting for iteration.completed at step 1; the builder's step was lost"},
	} {
		t.Run(name, func(t *testing.T) {
			next, cmds := step(t, c.s, TimedOut{Step: c.s.Step, Idle: 15*time.Minute + 200*time.Millisecond})
			if next.Phase != PhaseEscalated || !strings.HasPrefix(next.Reason, c.want) {
				t.Fatalf("phase %s reason %q; want escalated with %q", next.Phase, next.Reason, c.want)
			}
			if d := payload[events.SessionEscalatedData](t, cmds, events.SessionEscalated); d.Reason != next.Reason {
				t.Fatalf("escalation says %q", d.Reason)
			}
		})
	}
	s := reviewing(t)
	if _, _, err := Next(s, TimedOut{Step: s.Step - 1, Idle: time.Hour}, t0); !errors.Is(err, ErrStale) {
		t.Fatalf("a time-out for a step the session left: %v, want stale", err)
	}
	s.Phase = PhaseEscalated
	if _, _, err := Next(s, TimedOut{Step: s.Step, Idle: time.Hour}, t0); !errors.Is(err, ErrStale) {
		t.Fatalf("a time-out of a paused session: %v, want stale (it waits for a person, not for an event)", err)
	}
}

func TestWaitingFor(t *testing.T) {
	if got := reviewing(t).WaitingFor(); got != events.CritiqueCompleted {
		t.Fatalf("WaitingFor = %s", got)
	}
	done := State{Phase: PhaseFailed}
	if got := done.WaitingFor(); got != "" {
		t.Fatalf("a failed session waits for %s", got)
	}
}

func TestEndedRecordsAFailureMadeWithoutTheState(t *testing.T) {
	s := reviewing(t)
	next, cmds := step(t, s, Ended{Step: s.Step, Reason: "redis was away"})
	if next.Phase != PhaseFailed || next.Reason != "redis was away" || next.Step != s.Step+1 {
		t.Fatalf("phase %s reason %q step %d", next.Phase, next.Reason, next.Step)
	}
	if got := published(cmds); !eq(got, []events.Type{events.SessionFailed}) || cmds[0].Publish.Step != s.Step+1 {
		t.Fatalf("published %v; want the failure announced again as a new event", got)
	}
	if _, _, err := Next(next, Ended{Step: s.Step, Reason: "again"}, t0); !errors.Is(err, ErrStale) {
		t.Fatalf("Ended on an ended session: %v", err)
	}
}

func TestEnds(t *testing.T) {
	for _, c := range []struct {
		phase Phase
		typ   events.Type
		want  bool
	}{
		{PhaseCompleted, events.SessionCompleted, true},
		{PhaseIterating, events.SessionCompleted, false},
		{PhaseFailed, events.SessionFailed, true},
		{PhaseEscalated, events.SessionFailed, false},
		{PhaseEscalated, events.SessionEscalated, true},
		{PhaseCompleted, events.TaskCompleted, false},
	} {
		if got := Ends(c.phase, c.typ); got != c.want {
			t.Errorf("Ends(%s, %s) = %v", c.phase, c.typ, got)
		}
	}
}
