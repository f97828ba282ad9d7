package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/meshtest"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/store"
)

// journal is the step journal of pkg/store on the test Redis, under a fresh
// prefix.
func journal(t *testing.T) Journal {
	t.Helper()
	rdb, err := store.Connect(context.Background(), meshtest.RedisURL(t))
	if err != nil {
		t.Fatalf("connect to redis: %v", err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return store.New(rdb, meshtest.Prefix(t), time.Hour)
}

// result is a step's result as a service would publish it.
type result struct {
	Value string `json:"value"`
	Calls int    `json:"calls"`
	Error string `json:"error,omitempty"`
}

// counted is a compute function that counts its calls and returns what
// next says for the call.
type counted struct {
	calls int
	next  func(call int) (result, error)
}

func (c *counted) compute(context.Context) (result, error) {
	c.calls++
	return c.next(c.calls)
}

// published records what a Step publishes.
type published struct{ got []result }

func (p *published) publish(_ context.Context, r result) error {
	p.got = append(p.got, r)
	return nil
}

func TestOnceComputesOnceAndReplaysTheRecord(t *testing.T) {
	j, env := journal(t), event(t)
	c := &counted{next: func(call int) (result, error) { return result{Value: fmt.Sprintf("computed by call %d", call)}, nil }}
	for range 2 {
		got, err := Once(context.Background(), j, env, "reply", c.compute)
		if err != nil {
			t.Fatal(err)
		}
		if got.Value != "computed by call 1" {
			t.Fatalf("Once = %+v, want the first computation's result", got)
		}
	}
	if c.calls != 1 {
		t.Fatalf("computed %d times, want 1: the second delivery must reuse the record", c.calls)
	}
	// Another field of the step, or another step, is another result.
	if _, err := Once(context.Background(), j, env, "other", c.compute); err != nil || c.calls != 2 {
		t.Fatalf("another field: err %v, %d computations; want nil, 2", err, c.calls)
	}
	next := env
	next.Step++
	if got, err := Once(context.Background(), j, next, "reply", c.compute); err != nil || got.Value != "computed by call 3" {
		t.Fatalf("the next step got %+v, %v; want its own computation", got, err)
	}
}

func TestOnceRecordsNoError(t *testing.T) {
	j, env := journal(t), event(t)
	transient := errors.New("503")
	c := &counted{next: func(call int) (result, error) {
		if call == 1 {
			return result{}, transient
		}
		return result{Value: "ok"}, nil
	}}
	if _, err := Once(context.Background(), j, env, "reply", c.compute); err != transient {
		t.Fatalf("Once returned %v, want the compute error as it is", err)
	}
	if got, err := Once(context.Background(), j, env, "reply", c.compute); err != nil || got.Value != "ok" || c.calls != 2 {
		t.Fatalf("after a failure: %+v, %v, %d computations; want a new computation", got, err, c.calls)
	}
}

// awayJournal is a journal whose server is away for its next away
// records: what a Redis outage does to a step that was computing (running
// a command, a verify) when it began.
type awayJournal struct {
	Journal
	away int
}

func (a *awayJournal) JournalPut(ctx context.Context, session string, step int, field string, v any) error {
	if a.away > 0 {
		a.away--
		return Unavailable(errors.New("redis: connection refused"))
	}
	return a.Journal.JournalPut(ctx, session, step, field, v)
}

// A result computed while the journal was away is recorded when RideOut
// runs the handler again, not computed again: the command finished in this
// process, so it must neither run twice nor be taken for interrupted.
// Without RideOut (no handling to share with) only the journal counts.
func TestOnceRecordsAResultComputedDuringAnOutage(t *testing.T) {
	j, env := journal(t), event(t)
	away := &awayJournal{Journal: j, away: 2}
	c := &counted{next: func(call int) (result, error) { return result{Value: fmt.Sprintf("ran by call %d", call)}, nil }}
	var got result
	handler := RideOut(time.Minute, time.Millisecond, 2*time.Millisecond, nil)(func(ctx context.Context, env events.Envelope) error {
		var err error
		got, err = Once(ctx, away, env, "tool:0", c.compute)
		return err
	})
	if err := handler(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if c.calls != 1 || got.Value != "ran by call 1" {
		t.Fatalf("computed %d times, got %+v; want one computation, recorded once the journal was back", c.calls, got)
	}
	var recorded result
	if found, err := j.JournalGet(context.Background(), env.Session, env.Step, "tool:0", &recorded); err != nil || !found || recorded != got {
		t.Fatalf("journal has %+v (found %v, %v), want %+v", recorded, found, err, got)
	}

	away.away = 1
	next := env
	next.Step++
	if _, err := Once(context.Background(), away, next, "tool:0", c.compute); !IsUnavailable(err) {
		t.Fatalf("Once = %v, want the outage", err)
	}
	if _, err := Once(context.Background(), away, next, "tool:0", c.compute); err != nil || c.calls != 3 {
		t.Fatalf("a new handling: %v, %d computations; want it computed again (the start marker of a command is what stops a rerun then)", err, c.calls)
	}
}

// A redelivery of the event to this replica while the first handling still
// waits out the outage (a NATS restart can redeliver it then) finds the
// result the first handling computed and could not record: it records it
// instead of computing it again, and the first handling, when it wakes,
// finds it in the journal.
func TestARedeliveryHereFindsTheResultAnEarlierHandlingHeld(t *testing.T) {
	j, env := journal(t), event(t)
	away := &awayJournal{Journal: j, away: 1}
	c := &counted{next: func(call int) (result, error) { return result{Value: fmt.Sprintf("ran by call %d", call)}, nil }}
	firstFailed := make(chan struct{})
	release := make(chan struct{})
	var first, second result
	handling := 0
	var mu sync.Mutex
	handler := RideOut(time.Minute, time.Millisecond, 2*time.Millisecond, nil)(func(ctx context.Context, env events.Envelope) error {
		mu.Lock()
		handling++
		n := handling
		mu.Unlock()
		got, err := Once(ctx, away, env, "tool:0", c.compute)
		switch {
		case n == 1 && err != nil:
			// The first handling waits, as RideOut would, while the event
			// is redelivered.
			close(firstFailed)
			<-release
			return err
		case n == 1 || n == 3:
			first = got
		default:
			second = got
		}
		return err
	})
	done := make(chan error, 1)
	go func() { done <- handler(context.Background(), env) }()
	<-firstFailed
	if err := handler(context.Background(), env); err != nil {
		t.Fatalf("the redelivery: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the first handling: %v", err)
	}
	if c.calls != 1 || second.Value != "ran by call 1" || first != second {
		t.Fatalf("computed %d times; the redelivery got %+v, the first handling %+v: want one computation, shared", c.calls, second, first)
	}
	var recorded result
	if found, err := j.JournalGet(context.Background(), env.Session, env.Step, "tool:0", &recorded); err != nil || !found || recorded != second {
		t.Fatalf("journal has %+v (found %v, %v), want %+v", recorded, found, err, second)
	}
}

// brokenJournal fails every call.
type brokenJournal struct{}

func (brokenJournal) JournalGet(context.Context, string, int, string, any) (bool, error) {
	return false, errors.New("redis: connection refused")
}
func (brokenJournal) JournalPut(context.Context, string, int, string, any) error {
	return errors.New("redis: connection refused")
}

func TestOnceWithoutItsJournalComputesNothing(t *testing.T) {
	c := &counted{next: func(int) (result, error) { return result{Value: "ok"}, nil }}
	_, err := Once(context.Background(), brokenJournal{}, event(t), "reply", c.compute)
	if err == nil || err.Error() != "recall reply of step 3: redis: connection refused" || IsPermanent(err) {
		t.Fatalf("Once = %v, want a retryable error saying what it was doing", err)
	}
	if c.calls != 0 {
		t.Fatalf("computed %d times without knowing whether the step was done", c.calls)
	}
}

// failedStep is a Step whose Compute fails with err after one model call.
func failedStep(err error, p *published) (Step[result], *counted) {
	c := &counted{next: func(int) (result, error) { return result{Calls: 1}, err }}
	return Step[result]{
		Compute: c.compute,
		Failed: func(partial result, err error) result {
			partial.Error = err.Error()
			return partial
		},
		Publish: p.publish,
	}, c
}

func TestStepRunOnceRecordsAndPublishesTheFailure(t *testing.T) {
	j, env := journal(t), event(t)
	var p published
	s, c := failedStep(Permanent(errors.New("401 invalid api key")), &p)
	for range 2 {
		if err := s.RunOnce(onDelivery(1, 5), j, env, "verdict"); err != nil {
			t.Fatalf("RunOnce = %v, want nil: the failure is the result", err)
		}
	}
	want := result{Calls: 1, Error: "401 invalid api key"}
	if len(p.got) != 2 || p.got[0] != want || p.got[1] != want {
		t.Fatalf("published %+v, want %+v twice (the redelivery publishes the record again)", p.got, want)
	}
	if c.calls != 1 {
		t.Fatalf("computed %d times, want 1: the failure was recorded", c.calls)
	}
}

func TestStepRunOnceRetriesWhileDeliveriesLast(t *testing.T) {
	j, env := journal(t), event(t)
	var p published
	transient := errors.New("503 upstream overloaded")
	s, c := failedStep(transient, &p)
	if err := s.RunOnce(onDelivery(1, 2), j, env, "verdict"); err != transient {
		t.Fatalf("RunOnce on delivery 1 of 2 = %v, want the retryable error for the runner", err)
	}
	if len(p.got) != 0 {
		t.Fatalf("published %+v before the last delivery", p.got)
	}
	if err := s.RunOnce(onDelivery(2, 2), j, env, "verdict"); err != nil {
		t.Fatalf("RunOnce on the last delivery = %v, want nil", err)
	}
	if want := (result{Calls: 1, Error: transient.Error()}); len(p.got) != 1 || p.got[0] != want || c.calls != 2 {
		t.Fatalf("published %+v after %d computations, want %+v after 2", p.got, c.calls, want)
	}
}

func TestStepRun(t *testing.T) {
	hopeless := Permanent(errors.New("400 bad request"))
	t.Run("success", func(t *testing.T) {
		var p published
		s := Step[result]{Compute: func(context.Context) (result, error) { return result{Value: "v"}, nil }, Publish: p.publish}
		if err := s.Run(onDelivery(1, 5)); err != nil || len(p.got) != 1 || p.got[0].Value != "v" {
			t.Fatalf("Run = %v, published %+v; want nil, the result", err, p.got)
		}
	})
	t.Run("given up", func(t *testing.T) {
		var p published
		s, _ := failedStep(hopeless, &p)
		if err := s.Run(onDelivery(1, 5)); err != nil || len(p.got) != 1 || p.got[0].Error != "400 bad request" {
			t.Fatalf("Run = %v, published %+v; want nil, the failure", err, p.got)
		}
	})
	t.Run("no Failed", func(t *testing.T) {
		var p published
		s, _ := failedStep(hopeless, &p)
		s.Failed = nil
		if err := s.Run(onDelivery(1, 5)); err != hopeless || len(p.got) != 0 {
			t.Fatalf("Run = %v, published %+v; want the error for the runner, nothing", err, p.got)
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		var p published
		s, _ := failedStep(hopeless, &p)
		ctx, cancel := context.WithCancel(onDelivery(5, 5))
		cancel()
		if err := s.Run(ctx); err != hopeless || len(p.got) != 0 {
			t.Fatalf("Run = %v, published %+v; want the error for the runner, nothing", err, p.got)
		}
	})
	t.Run("publish fails", func(t *testing.T) {
		down := errors.New("nats: no responders")
		s := Step[result]{
			Compute: func(context.Context) (result, error) { return result{}, nil },
			Publish: func(context.Context, result) error { return down },
		}
		if err := s.Run(onDelivery(1, 5)); err != down {
			t.Fatalf("Run = %v, want the publish error", err)
		}
	})
}

// The services pass their store as the journal.
var _ Journal = (*store.Store)(nil)
