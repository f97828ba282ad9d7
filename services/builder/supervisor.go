package builder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
	"github.com/ralphmesh/ralph/pkg/store"
)

// This file is the builder's part in "no session waits for ever": the
// supervisor, which ends the session of every event a stage gave up on
// (the dead-letter stream), the watchdog, which ends a session nothing has
// happened in for Config.WatchdogIdle, and what is done when a session's
// state is gone from Redis. The builder owns the session state, so it is
// the one that ends sessions; the decisions are the state machine's
// (DeadLettered, TimedOut, Ended in liveness.go).

// StateGone is the reason a session fails with when its state is missing
// from Redis while the stream still has its events.
const StateGone = "session state is gone: Redis lost it; is persistence on? (a session's keys also expire RALPH_REDIS_TTL after its last write)"

// watchdogBatch bounds the sessions one watchdog round looks at; the rest
// wait for the next round.
const watchdogBatch = 100

// onDeadLetter ends the session of an event a stage gave up on, if the
// session was waiting for it.
func (s *Service) onDeadLetter(ctx context.Context, dl bus.DeadLetter) error {
	log := s.d.Log.With(zap.String("session", dl.Session), zap.String("type", string(dl.Type)), zap.Int("step", dl.Event.Step),
		zap.String("consumer", dl.Consumer), zap.String("reason", dl.Reason))
	if events.ValidSession(dl.Session) != nil {
		log.Warn("dead letter of no session; nothing to end")
		return nil
	}
	reason := deadLetterReason(dl)
	var st State
	ver, err := s.d.Store.LoadState(ctx, dl.Session, &st)
	if errors.Is(err, store.ErrNotFound) {
		if dl.Type == events.SessionStarted {
			// The session never got a state: its start was given up on.
			return s.failWithoutState(ctx, log, dl.Team, dl.Session, dl.Event.Task, dl.Event.Step, reason)
		}
		return s.stateGone(ctx, log, dl.Team, dl.Session, dl.Event.Task, dl.Event.Step)
	}
	if err != nil {
		return fmt.Errorf("end session %s after %s: %w", dl.Session, reason, err)
	}
	if err := s.commit(ctx, log, dl.Session, st, ver, DeadLettered{Step: dl.Event.Step, Type: dl.Type, Reason: reason}); err != nil {
		return fmt.Errorf("end session %s after %s: %w", dl.Session, reason, err)
	}
	return nil
}

// deadLetterReason says who gave up on what, and why.
func deadLetterReason(dl bus.DeadLetter) string {
	who := dl.Service
	if who == "" {
		who = "a service"
	}
	plural := "ies"
	if dl.Deliveries == 1 {
		plural = "y"
	}
	return fmt.Sprintf("%s gave up on %s at step %d after %d deliver%s: %s", who, dl.Type, dl.Event.Step, dl.Deliveries, plural, dl.Reason)
}

// supervisorGaveUp is the supervisor's own last word, when a dead letter
// cannot be applied to the state (Redis is still away after the outage
// budget, the state cannot be read): the session is failed by publishing
// session.failed without the state, and the watchdog brings the state in
// line once Redis is back (Ended).
func (s *Service) supervisorGaveUp(ctx context.Context, env events.Envelope, err error) error {
	log := s.d.Log.With(zap.String("session", env.Session), zap.Int("step", env.Step))
	if events.ValidSession(env.Session) != nil {
		return nil
	}
	return s.failWithoutState(ctx, log, env.TeamOrDefault(), env.Session, env.Task, env.Step,
		fmt.Sprintf("%v; the session state could not be updated, so this failure was published without it", err))
}

// stateGone fails a session whose state Redis no longer has, if the stream
// says it started and has not ended since step.
func (s *Service) stateGone(ctx context.Context, log *zap.Logger, team, session, task string, step int) error {
	if _, started, err := s.d.Bus.LastEvent(ctx, session, events.SessionStarted); err != nil {
		return err
	} else if !started {
		log.Warn("event of a session that never started; nothing to end")
		return nil
	}
	return s.failWithoutState(ctx, log, team, session, task, step, StateGone)
}

// failWithoutState publishes session.failed (in team) for a session whose
// state cannot be used, unless the stream shows it ended at step or later,
// and says so in the index.
func (s *Service) failWithoutState(ctx context.Context, log *zap.Logger, team, session, task string, step int, reason string) error {
	if end, ended, err := s.endedOnStream(ctx, session, step); err != nil {
		return err
	} else if ended {
		log.Info("session already ended on the stream", zap.String("with", string(end.Type)))
		return nil
	}
	env, err := events.New(events.SessionFailed, session, task, step, s.d.Clock(), events.SessionFailedData{Reason: reason})
	if err != nil {
		return bus.Permanent(fmt.Errorf("fail session %s: %w", session, err))
	}
	if err := s.d.Bus.Publish(ctx, env.For(team)); err != nil {
		return err
	}
	if s.d.Index != nil {
		if err := s.d.Index.End(ctx, team, session, sessionindex.StateFailed, reason, s.d.Clock()); err != nil {
			log.Warn("the session index does not show the failure", zap.Error(err))
		}
	}
	log.Error("session failed without its state", zap.String("reason", reason))
	return nil
}

// endedOnStream is the terminal event the stream has for session at step
// or later, if any.
func (s *Service) endedOnStream(ctx context.Context, session string, step int) (events.Envelope, bool, error) {
	for _, typ := range []events.Type{events.SessionFailed, events.SessionCompleted, events.SessionEscalated} {
		env, found, err := s.d.Bus.LastEvent(ctx, session, typ)
		if err != nil {
			return env, false, err
		}
		if found && env.Step >= step {
			return env, true, nil
		}
	}
	return events.Envelope{}, false, nil
}

// watch runs the watchdog every quarter of Config.WatchdogIdle (at most a
// minute) until ctx ends.
func (s *Service) watch(ctx context.Context) {
	t := time.NewTicker(min(s.d.Config.WatchdogIdle/4, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
				s.d.Log.Warn("watchdog round failed; trying again next round", zap.Error(err))
			}
		}
	}
}

// sweep is one watchdog round: every session of the activity index with no
// sign of life for WatchdogIdle is escalated with the reason (TimedOut),
// unless the stream shows it failed without its state, which is then
// recorded (Ended). Every builder replica runs rounds; the state's
// compare-and-set lets one of them win each session.
func (s *Service) sweep(ctx context.Context) error {
	now := s.d.Clock()
	quiet, err := s.d.Store.QuietSince(ctx, now.Add(-s.d.Config.WatchdogIdle), watchdogBatch)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range quiet {
		if err := s.checkQuiet(ctx, a.Session, now); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", a.Session, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Service) checkQuiet(ctx context.Context, session string, now time.Time) error {
	log := s.d.Log.With(zap.String("session", session), zap.String("by", "watchdog"))
	var st State
	ver, err := s.d.Store.LoadState(ctx, session, &st)
	if errors.Is(err, store.ErrNotFound) {
		// Expired (RALPH_REDIS_TTL) or lost: nothing left to watch. The
		// next event of the session, if any, says the state is gone.
		return s.d.Store.MarkEnded(ctx, session)
	}
	if err != nil {
		return err
	}
	if st.Done() {
		return s.track(ctx, session, st, ver)
	}
	if end, ended, err := s.endedOnStream(ctx, session, st.Step); err != nil {
		return err
	} else if ended && end.Type == events.SessionFailed {
		var d events.SessionFailedData
		_ = end.Decode(&d)
		return s.commit(ctx, log, session, st, ver, Ended{Step: end.Step, Reason: d.Reason})
	}
	// Checked again after the state was read: a sign of life in between
	// leaves the session alone, a transition makes the save conflict.
	last, found, err := s.d.Store.LastActive(ctx, session)
	if err != nil {
		return err
	}
	idle := now.Sub(last)
	if !found || idle < s.d.Config.WatchdogIdle {
		return nil
	}
	err = s.commit(ctx, log, session, st, ver, TimedOut{Step: st.Step, Idle: idle})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}

// commit applies in to st (read at version ver) and, unless it is stale,
// saves the new state with its commands under compare-and-set, updates the
// activity index, and executes the commands. A stale input re-executes the
// pending commands of the transition that made it stale.
func (s *Service) commit(ctx context.Context, log *zap.Logger, session string, st State, ver int64, in Input) error {
	return s.commitFrom(ctx, log, session, kept{state: st, ver: ver}, false, in, nil)
}

// commitFrom is commit from a copy of the session, with units to
// append to a context before the save (app, may be nil), all written in
// one round trip (store.Commit). A copy this replica kept (cached) is
// acted on only through a successful save, whose compare-and-set proves
// it current: a stale input, a refused one or a conflict reads the state
// again and decides on that.
func (s *Service) commitFrom(ctx context.Context, log *zap.Logger, session string, snap kept, cached bool, in Input, app *appendUnits) error {
	st, ver := snap.state, snap.ver
	next, cmds, err := Next(st, in, s.d.Clock())
	if err != nil && cached {
		return s.recommit(ctx, log, session, in, app)
	}
	if errors.Is(err, ErrStale) {
		log.Debug("stale input; re-executing pending commands", zap.String("input", fmt.Sprintf("%T", in)),
			zap.String("phase", string(st.Phase)), zap.Int("state_step", st.Step))
		if app != nil {
			if err := s.d.Store.AppendUnits(ctx, session, app.scope, app.units...); err != nil {
				return err
			}
		}
		if err := s.track(ctx, session, st, ver); err != nil {
			return err
		}
		return s.execute(ctx, st.Pending)
	}
	if err != nil {
		return bus.Permanent(err)
	}
	next.Pending = cmds
	c := store.Commit{Session: session, Expect: ver, State: next, Ended: next.Done(), Now: s.d.Clock(), Usage: s.d.Index != nil}
	if app != nil {
		c.Scope, c.Units = app.scope, app.units
	}
	res, err := s.d.Store.Commit(ctx, c)
	if errors.Is(err, store.ErrConflict) && cached {
		return s.recommit(ctx, log, session, in, app)
	}
	if err != nil {
		s.sessions.forget(session)
		return err
	}
	saved := kept{state: next, ver: res.Version, scope: snap.scope, units: snap.units, ctxVer: snap.ctxVer}
	if app != nil {
		saved = saved.withContext(app.scope, nil, 0)
		switch {
		case app.baseVer > 0 && res.Added == len(app.units) && res.ContextVersion == app.baseVer+1:
			saved = saved.withContext(app.scope, slices.Concat(app.base, app.units), res.ContextVersion)
		case app.baseVer > 0 && res.Added == 0 && res.ContextVersion == app.baseVer:
			saved = saved.withContext(app.scope, app.base, app.baseVer)
		}
	}
	s.sessions.put(session, saved)
	if next.Phase != st.Phase || next.Step != st.Step {
		log.Info("transition", zap.String("from", string(st.Phase)), zap.String("to", string(next.Phase)), zap.Int("next_step", next.Step))
	}
	if next.Done() && next.Reason != "" {
		log.Warn("session ended", zap.String("phase", string(next.Phase)), zap.String("reason", next.Reason))
	}
	if next.Done() {
		// The index says the session ended before the event that says so
		// is out: whoever follows the events and then reads the index sees
		// the end there too.
		s.sessions.forget(session)
		if err := s.indexWith(ctx, next, res.Version, res.Usage); err != nil {
			return err
		}
		return s.execute(ctx, cmds)
	}
	// Otherwise the next step goes first and the index after it: a
	// session's index entry is bookkeeping for people, and an immediate
	// one (a new task, a task's status) is a JetStream round trip the step
	// need not wait for. Should the events fail, the redelivery's track
	// writes the entry; an entry older than one written by a commit nested
	// in execute (a work-product commit) is dropped by its version.
	if err := s.execute(ctx, cmds); err != nil {
		return err
	}
	return s.indexWith(ctx, next, res.Version, res.Usage)
}

// errStateGone: the state a replica kept is gone from Redis; the handler
// of the event ends the session as stateGone does.
var errStateGone = errors.New("session state is gone")

// recommit is commitFrom again on the state read from Redis, after this
// replica's copy turned out not to be the session's latest.
func (s *Service) recommit(ctx context.Context, log *zap.Logger, session string, in Input, app *appendUnits) error {
	snap, err := s.loadState(ctx, session)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", errStateGone, err)
	}
	if err != nil {
		return err
	}
	if app != nil {
		// The context the step was given is not known to be current.
		app = &appendUnits{scope: app.scope, units: app.units}
	}
	return s.commitFrom(ctx, log, session, snap, false, in, app)
}

// track keeps the activity index and the session index in line with a
// state saved at version ver: a session that goes on is marked active now,
// one that ended leaves the activity index; the session index shows the
// state.
func (s *Service) track(ctx context.Context, session string, st State, ver int64) error {
	if st.Done() {
		if err := s.d.Store.MarkEnded(ctx, session); err != nil {
			return err
		}
	} else if err := s.d.Store.MarkActive(ctx, session, s.d.Clock()); err != nil {
		return err
	}
	return s.index(ctx, st, ver)
}

// readyOnce calls ready once both of the builder's runners (the events and
// the dead letters) are consuming.
func readyOnce(ready func(), runners int) func() {
	if ready == nil {
		return nil
	}
	var mu sync.Mutex
	left := runners
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if left--; left == 0 {
			ready()
		}
	}
}
