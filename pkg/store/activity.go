package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The activity index is one sorted set of the sessions that are not over,
// scored by the time (Unix milliseconds) of their last sign of life: a
// state save, or a stage at work on one of their events. The builder's
// watchdog reads it to find sessions that have gone silent. It is a key of
// its own, outside every session's hash tag, so it is written next to the
// state, not in the state's compare-and-set; a lost write is made good by
// the next one.
func (s *Store) activityKey() string { return s.prefix + ":sessions:active" }

// Activity is a session of the activity index and its last sign of life.
type Activity struct {
	Session string
	Last    time.Time
}

// MarkActive records that session is going on, as of at (a later mark
// wins; an earlier one does not move it back).
func (s *Store) MarkActive(ctx context.Context, session string, at time.Time) error {
	err := s.rdb.ZAddGT(ctx, s.activityKey(), redis.Z{Score: float64(at.UnixMilli()), Member: session}).Err()
	if err != nil {
		return fmt.Errorf("mark session %s active: redis: %w", session, unavailable(err))
	}
	return nil
}

// TouchActive records a sign of life of session at at, if it is in the
// index: a stage at work on an event of a session that is over does not
// bring it back.
func (s *Store) TouchActive(ctx context.Context, session string, at time.Time) error {
	err := s.rdb.ZAddArgs(ctx, s.activityKey(), redis.ZAddArgs{XX: true, GT: true,
		Members: []redis.Z{{Score: float64(at.UnixMilli()), Member: session}}}).Err()
	if err != nil {
		return fmt.Errorf("touch session %s: redis: %w", session, unavailable(err))
	}
	return nil
}

// MarkEnded takes session out of the index: it completed, failed or waits
// for a person.
func (s *Store) MarkEnded(ctx context.Context, session string) error {
	if err := s.rdb.ZRem(ctx, s.activityKey(), session).Err(); err != nil {
		return fmt.Errorf("mark session %s ended: redis: %w", session, unavailable(err))
	}
	return nil
}

// QuietSince lists up to limit sessions of the index whose last sign of
// life is before t, the quietest first.
func (s *Store) QuietSince(ctx context.Context, t time.Time, limit int) ([]Activity, error) {
	zs, err := s.rdb.ZRangeByScoreWithScores(ctx, s.activityKey(), &redis.ZRangeBy{
		Min: "-inf", Max: fmt.Sprintf("(%d", t.UnixMilli()), Count: int64(limit),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("quiet sessions: redis: %w", unavailable(err))
	}
	out := make([]Activity, 0, len(zs))
	for _, z := range zs {
		name, _ := z.Member.(string)
		out = append(out, Activity{Session: name, Last: time.UnixMilli(int64(z.Score))})
	}
	return out, nil
}

// LastActive is session's last sign of life; found is false when it is not
// in the index.
func (s *Store) LastActive(ctx context.Context, session string) (last time.Time, found bool, err error) {
	score, err := s.rdb.ZScore(ctx, s.activityKey(), session).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("last activity of %s: redis: %w", session, unavailable(err))
	}
	return time.UnixMilli(int64(score)), true, nil
}
