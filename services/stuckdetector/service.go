package stuckdetector

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/metrics"
	"github.com/ralphmesh/ralph/pkg/store"
)

// Name is the service name.
const Name = "stuckdetector"

// Bus is what the detector needs of the event bus.
type Bus interface {
	Publish(ctx context.Context, env events.Envelope) error
	Run(ctx context.Context, service string, handlers map[events.Type]bus.Handler, o bus.RunOptions) error
}

// Store keeps the window in Redis, so every replica sees the same history
// and it survives restarts and compaction.
type Store interface {
	AppendWindow(ctx context.Context, session, task string, rec events.IterationRecord, size int) ([]events.IterationRecord, error)
	ClearWindow(ctx context.Context, session, task string, upTo int) error
	Awaiting(ctx context.Context, env events.Envelope, phase string) (store.Head, *store.TaskView, error)
}

// Deps are the detector's collaborators.
type Deps struct {
	Bus      Bus
	Store    Store
	Clock    func() time.Time
	Log      *zap.Logger
	Config   Config
	Patterns []Pattern
	Run      bus.RunOptions
	// Metrics may be nil.
	Metrics *metrics.Metrics
}

// Service analyzes every iteration.
type Service struct{ d Deps }

// New builds the service; nil Patterns means DefaultPatterns.
func New(d Deps) *Service {
	if d.Clock == nil {
		d.Clock = time.Now
	}
	if d.Patterns == nil {
		d.Patterns = DefaultPatterns()
	}
	d.Config = d.Config.withDefaults()
	return &Service{d: d}
}

// Run consumes iteration.completed until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	return s.d.Bus.Run(ctx, Name, map[events.Type]bus.Handler{events.IterationCompleted: s.onIteration}, s.d.Run)
}

func (s *Service) onIteration(ctx context.Context, env events.Envelope) error {
	rec, err := events.DecodeAs[events.IterationRecord](env)
	if err != nil {
		return err
	}
	task := rec.TaskID
	if task == "" {
		task = env.Task
	}
	// Only the iteration the session waits to have analysed is added to
	// the window: a record for a session that does not exist, or forged
	// for one that does, must not make the detector fire.
	if _, cur, err := s.d.Store.Awaiting(ctx, env, store.PhaseAnalyzing); store.Ignorable(err) || (err == nil && cur.ID != task) {
		s.d.Log.Warn("ignoring iteration.completed: the session does not await its analysis (a late redelivery, or a forged event)",
			zap.String("session", env.Session), zap.String("task", task), zap.Int("step", env.Step), zap.String("event", env.ID), zap.Error(err))
		return nil
	} else if err != nil {
		return err
	}
	window, err := s.d.Store.AppendWindow(ctx, env.Session, task, rec, s.d.Config.Window)
	if err != nil {
		return err
	}
	out := events.IterationAnalyzedData{Iteration: rec.Iteration, ClaimedDone: rec.ClaimedDone}
	if sig := Analyze(window, s.d.Config, s.d.Patterns); sig != nil {
		out.Signal = sig
		s.d.Metrics.Signal(sig.Pattern, string(sig.Action))
		s.d.Log.Info("stuck signal", zap.String("session", env.Session), zap.String("task", task), zap.Int("step", env.Step),
			zap.String("event", env.ID), zap.Int("iteration", rec.Iteration), zap.String("pattern", sig.Pattern),
			zap.Float64("confidence", sig.Confidence), zap.String("action", string(sig.Action)), zap.String("strength", string(sig.Strength)))
		// The builder prunes or decomposes on strong evidence, so the
		// evidence before it must not fire again; weak evidence stays to
		// grow if the builder's nudge changes nothing (ClearsWindow).
		if ClearsWindow(sig) {
			if err := s.d.Store.ClearWindow(ctx, env.Session, task, rec.Iteration); err != nil {
				return fmt.Errorf("clear stuck window of task %s after iteration %d: %w", task, rec.Iteration, err)
			}
		}
	}
	return s.d.Bus.Publish(ctx, events.Must(events.IterationAnalyzed, env.Session, env.Task, env.Step, s.d.Clock(), out).For(env.Team))
}
