package bus

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Journal records what a step has done, by session, step and field, so
// that a redelivered event does not do it again (pkg/store's step journal).
type Journal interface {
	JournalGet(ctx context.Context, session string, step int, field string, v any) (bool, error)
	JournalPut(ctx context.Context, session string, step int, field string, v any) error
}

// Once returns the result recorded in j under field for the step of env
// or, when there is none, computes it and records it first. A redelivered
// event thereby gets what an earlier delivery computed (a model reply that
// was paid for, a command that must not run twice). A compute error is
// returned as it is and nothing is recorded.
//
// A result computed but not recorded (the journal's server went away
// meanwhile) is held while RideOut runs the handler again in this process,
// and recorded then: the command ran and its result is known, so it is
// neither run again nor taken for interrupted.
func Once[T any](ctx context.Context, j Journal, env events.Envelope, field string, compute func(context.Context) (T, error)) (T, error) {
	h, _ := ctx.Value(heldKey{}).(*held)
	key := fmt.Sprintf("%s/%d/%s", env.Session, env.Step, field)
	if v, ok := h.get(key); ok {
		result := v.(T)
		if err := j.JournalPut(ctx, env.Session, env.Step, field, result); err != nil {
			return result, fmt.Errorf("record %s of step %d: %w", field, env.Step, err)
		}
		h.drop(key)
		return result, nil
	}
	var result T
	found, err := j.JournalGet(ctx, env.Session, env.Step, field, &result)
	if err != nil {
		return result, fmt.Errorf("recall %s of step %d: %w", field, env.Step, err)
	}
	if found {
		return result, nil
	}
	if result, err = compute(ctx); err != nil {
		return result, err
	}
	if err := j.JournalPut(ctx, env.Session, env.Step, field, result); err != nil {
		h.keep(key, result)
		return result, fmt.Errorf("record %s of step %d: %w", field, env.Step, err)
	}
	return result, nil
}

// held is what Once computed during a handling of an event but could not
// record, by session, step and field. RideOut keeps one for the handlings
// of its handler in this process (in their context), so a result outlives
// a run of the handler that failed for an outage, and a redelivery of the
// same event here finds it too; another replica knows only the journal.
// It holds at most maxHeld results, the oldest forgotten first (a result
// is dropped as soon as it is recorded, so only results of events given up
// on during an outage linger).
type held struct {
	mu      sync.Mutex
	results map[string]any
	order   []string
}

const maxHeld = 1024

type heldKey struct{}

func newHeld() *held { return &held{results: map[string]any{}} }

// withHeld is ctx with h as the place for results Once could not record.
func withHeld(ctx context.Context, h *held) context.Context {
	return context.WithValue(ctx, heldKey{}, h)
}

func (h *held) get(key string) (any, bool) {
	if h == nil {
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.results[key]
	return v, ok
}

func (h *held) keep(key string, v any) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.results[key]; !ok {
		h.order = append(h.order, key)
	}
	h.results[key] = v
	for len(h.order) > maxHeld {
		delete(h.results, h.order[0])
		h.order = h.order[1:]
	}
}

func (h *held) drop(key string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.results, key)
	h.order = slices.DeleteFunc(h.order, func(k string) bool { return k == key })
}

// Step is the policy of a handler that computes one result from its event
// and publishes it (a verdict, a decomposition, a prune, a compaction).
// When Compute fails for good (GivingUp), the result published is
// Failed's instead, which says why: whoever waits for the result goes on
// rather than wait for one that never comes.
type Step[T any] struct {
	// Compute does the work. With an error it may still return what it has
	// (the model calls it made, a verify result) for Failed to keep.
	Compute func(ctx context.Context) (T, error)
	// Failed turns what Compute returned with the error it was given up
	// on into the result to publish. Nil leaves every error to the runner.
	Failed func(partial T, err error) T
	// Publish sends the result on.
	Publish func(ctx context.Context, result T) error
}

// Run computes the result and publishes it.
func (s Step[T]) Run(ctx context.Context) error {
	result, err := s.settle(ctx)
	if err != nil {
		return err
	}
	return s.Publish(ctx, result)
}

// RunOnce is "compute, record, publish": Run with the result, a failure
// too, recorded in j under field for the step of env before it is
// published. A redelivered event publishes the recorded result again
// (the bus deduplicates it) instead of computing another.
func (s Step[T]) RunOnce(ctx context.Context, j Journal, env events.Envelope, field string) error {
	result, err := Once(ctx, j, env, field, s.settle)
	if err != nil {
		return err
	}
	return s.Publish(ctx, result)
}

// settle is Compute with the failures it gives up on turned into results.
func (s Step[T]) settle(ctx context.Context) (T, error) {
	result, err := s.Compute(ctx)
	if err != nil && s.Failed != nil && GivingUp(ctx, err) {
		return s.Failed(result, err), nil
	}
	return result, err
}
