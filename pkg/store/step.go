package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ralphmesh/ralph/pkg/units"
)

// This file is the builder's step in few round trips: what a replica that
// keeps a session in memory needs to check that it is still current
// (Peek), and the writes that end a transition sent together (Commit).

// Peek is what a step reads before it acts, in one round trip: the
// versions of the state and of a context, and what the step's journal
// holds so far.
type Peek struct {
	// StateVersion is 0 when the session has no state.
	StateVersion int64
	// ContextVersion is the version of the context of the scope asked.
	ContextVersion int64
	// Journal holds the step's journal fields, encoded.
	Journal map[string]string
}

// Peek reads the state's version, the context version of scope and the
// journal of step, pipelined.
func (s *Store) Peek(ctx context.Context, session, scope string, step int) (Peek, error) {
	var ver, ctxVer *redis.StringCmd
	var journal *redis.MapStringStringCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		ver = p.HGet(ctx, s.key(session, "state"), "version")
		ctxVer = p.Get(ctx, s.contextKeys(session, scope)[2])
		journal = p.HGetAll(ctx, s.key(session, "journal", strconv.Itoa(step)))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Peek{}, fmt.Errorf("peek session %s: redis: %w", session, unavailable(err))
	}
	var out Peek
	if out.StateVersion, err = versionOf(ver); err != nil {
		return Peek{}, fmt.Errorf("peek session %s: state: %w", session, err)
	}
	if out.ContextVersion, err = versionOf(ctxVer); err != nil {
		return Peek{}, fmt.Errorf("peek session %s: context %s: %w", session, scope, err)
	}
	out.Journal = journal.Val()
	return out, nil
}

// versionOf is a version read with GET or HGET: 0 when there is none.
func versionOf(c *redis.StringCmd) (int64, error) {
	v, err := c.Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad version %q", v)
	}
	return n, nil
}

// JournalValue decodes a field of a Peek's journal into v; found is false
// when the field is not there.
func (p Peek) JournalValue(field string, v any) (found bool, err error) {
	raw, ok := p.Journal[field]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return false, fmt.Errorf("read journal %s: decode: %w", field, err)
	}
	return true, nil
}

// JournalClaim records field for step unless it is there already, and
// reports whether this call recorded it: of two deliveries of a step that
// race to start a command, one claims it.
func (s *Store) JournalClaim(ctx context.Context, session string, step int, field string, v any) (claimed bool, err error) {
	key := s.key(session, "journal", strconv.Itoa(step))
	b, err := json.Marshal(v)
	if err != nil {
		return false, fmt.Errorf("claim journal %s %s: encode: %w", key, field, err)
	}
	var set *redis.BoolCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		set = p.HSetNX(ctx, key, field, b)
		p.Expire(ctx, key, s.ttl)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("claim journal %s %s: redis: %w", key, field, unavailable(err))
	}
	return set.Val(), nil
}

// JournalReply records field for step, as JournalPut, and adds one model
// call's tokens to the session's usage by role, as RecordUsage, in one
// transaction: a reply journaled is a reply counted, once, however often
// the step is delivered. (A reply whose journal write fails is not
// counted; its step asks the model again.)
func (s *Store) JournalReply(ctx context.Context, session string, step int, field string, v any, role string, in, out int) error {
	key := s.key(session, "journal", strconv.Itoa(step))
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write journal %s %s: encode: %w", key, field, err)
	}
	usage := s.key(session, "usage")
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, field, b)
		p.Expire(ctx, key, s.ttl)
		p.HIncrBy(ctx, usage, role+":input", int64(in))
		p.HIncrBy(ctx, usage, role+":output", int64(out))
		p.HIncrBy(ctx, usage, role+":calls", 1)
		p.Expire(ctx, usage, s.ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("write journal %s %s: redis: %w", key, field, unavailable(err))
	}
	return nil
}

// Commit is what ends one transition of a session, written in one round
// trip and in this order: units appended to a context (their ids once, as
// AppendUnits), the state saved under compare-and-set, the activity index,
// and the session's usage read for the session index. The order keeps a
// crash between two of them safe: a state is never saved before the units
// it counts on, and a lost activity mark is made good by the next.
type Commit struct {
	Session string
	// Scope and Units: units to append to the context of Scope first;
	// none appends nothing.
	Scope string
	Units []units.Unit
	// Expect is the version the state was read at; State the new state.
	Expect int64
	State  any
	// Ended takes the session out of the activity index; otherwise it is
	// marked active at Now.
	Ended bool
	Now   time.Time
	// Usage reads the session's usage (Store.Usage) too.
	Usage bool
}

// Committed is what a Commit found.
type Committed struct {
	// Version is the state's new version.
	Version int64
	// ContextVersion is the context's version after the append and Added
	// the units it added (0 when Units was empty).
	ContextVersion int64
	Added          int
	// Usage is Store.Usage's, when asked for.
	Usage map[string]int64
}

// Commit writes c pipelined; ErrConflict when the state changed since it
// was read at c.Expect (the units were appended all the same: their ids
// make a redelivered step's append change nothing).
func (s *Store) Commit(ctx context.Context, c Commit) (Committed, error) {
	data, head, err := encodeState(c.State, c.Expect+1)
	if err != nil {
		return Committed{}, fmt.Errorf("save session %s: %w", c.Session, err)
	}
	var unitArgs []any
	if len(c.Units) > 0 {
		if unitArgs, err = s.unitArgs(c.Session, c.Scope, c.Units); err != nil {
			return Committed{}, err
		}
	}
	// The scripts go whole (EVAL): a pipeline cannot fall back from
	// EVALSHA when the server's script cache was flushed.
	var appended, saved *redis.Cmd
	var usage *redis.MapStringStringCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if unitArgs != nil {
			appended = appendScript.Eval(ctx, p, s.contextKeys(c.Session, c.Scope), unitArgs...)
		}
		saved = casScript.Eval(ctx, p, []string{s.key(c.Session, "state")}, strconv.FormatInt(c.Expect, 10), data, s.ttlSeconds(), head)
		if c.Ended {
			p.ZRem(ctx, s.activityKey(), c.Session)
		} else {
			p.ZAddGT(ctx, s.activityKey(), redis.Z{Score: float64(c.Now.UnixMilli()), Member: c.Session})
		}
		if c.Usage {
			usage = p.HGetAll(ctx, s.key(c.Session, "usage"))
		}
		return nil
	})
	if err != nil {
		return Committed{}, fmt.Errorf("commit session %s: redis: %w", c.Session, unavailable(err))
	}
	var out Committed
	if appended != nil {
		r, err := appended.Int64Slice()
		if err != nil || len(r) != 2 {
			return Committed{}, fmt.Errorf("append context %s/%s: unexpected reply %v: %v", c.Session, c.Scope, appended.Val(), err)
		}
		out.Added, out.ContextVersion = int(r[0]), r[1]
	}
	nv, err := saved.Int64()
	if err != nil {
		return out, fmt.Errorf("save session %s: redis: %w", c.Session, unavailable(err))
	}
	if nv < 0 {
		return out, fmt.Errorf("save session %s at version %d: %w", c.Session, c.Expect, ErrConflict)
	}
	out.Version = nv
	if usage != nil {
		out.Usage = usageOf(usage.Val())
	}
	return out, nil
}
