// Package store owns what Ralph mesh keeps in Redis: session state with
// compare-and-set on a version, context units, artifacts (full tool
// outputs), the per-step journal of LLM answers and tool effects, the stuck
// detector's window, token usage and the session's memory (what its
// approved tasks learned, with its own compare-and-set). Every key of a session carries the
// session as a hash tag, <prefix>:{<session>}:..., so a session stays on one
// Redis Cluster slot.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/pkg/units"
)

var (
	// ErrNotFound: the session, artifact or journal entry does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the state was changed by someone else since it was read.
	ErrConflict = errors.New("version conflict")
)

// Store is the Redis side of the mesh.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// Config is the store's setting; its tag is the one home of the default
// (RALPH_REDIS_TTL, through pkg/config).
type Config struct {
	TTL time.Duration `split_words:"true" default:"168h" desc:"lifetime of a session's keys after their last write"`
}

// Validate rejects a TTL that would not keep keys at all.
func (c Config) Validate() error {
	return settings.Check(c.TTL > 0, "TTL", c.TTL, "must be positive")
}

// New wraps a client. ttl is how long a session's keys live after their last
// write; zero or negative means Config's default.
func New(rdb redis.UniversalClient, prefix string, ttl time.Duration) *Store {
	if ttl <= 0 {
		ttl = settings.Defaults[Config]().TTL
	}
	return &Store{rdb: rdb, prefix: prefix, ttl: ttl}
}

// Client exposes the Redis client for health checks.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

func (s *Store) key(session string, parts ...string) string {
	return s.prefix + ":{" + session + "}:" + strings.Join(parts, ":")
}

// ttlSeconds is the TTL for the Lua scripts' EXPIRE, in whole seconds
// rounded up: EXPIRE with 0 deletes the key, so a sub-second TTL must not
// truncate to 0.
func (s *Store) ttlSeconds() string {
	return strconv.FormatInt(int64((s.ttl+time.Second-1)/time.Second), 10)
}

// casScript writes a hash's data (ARGV[2]) if its version is still ARGV[1],
// with a TTL of ARGV[3] seconds. A session's state also passes its head as
// ARGV[4]: stored when given, removed when empty, so that a head is never
// older than its state; the memory's CAS passes no ARGV[4].
var casScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'version')
if cur == false then cur = '0' end
if cur ~= ARGV[1] then return -1 end
local nv = tonumber(ARGV[1]) + 1
redis.call('HSET', KEYS[1], 'version', nv, 'data', ARGV[2])
if ARGV[4] and ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'head', ARGV[4])
elseif ARGV[4] then
  redis.call('HDEL', KEYS[1], 'head')
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return nv
`)

// encodeState is a state as stored at version ver: its JSON, and its
// head's when it has one (Headed), else "" (no head is stored: readers read
// the state). The head carries ver, so that a head a writer without heads
// left behind (a builder of an earlier release, during a rolling upgrade)
// is known for older than the state.
func encodeState(v any, ver int64) (data, head []byte, err error) {
	if data, err = json.Marshal(v); err != nil {
		return nil, nil, fmt.Errorf("encode state: %w", err)
	}
	if h, ok := v.(Headed); ok {
		hd := h.SessionHead()
		hd.Version = ver
		if head, err = json.Marshal(hd); err != nil {
			return nil, nil, fmt.Errorf("encode head: %w", err)
		}
	}
	return data, head, nil
}

// LoadState decodes the session state into v and returns its version.
func (s *Store) LoadState(ctx context.Context, session string, v any) (int64, error) {
	res, err := s.rdb.HMGet(ctx, s.key(session, "state"), "version", "data").Result()
	if err != nil {
		return 0, fmt.Errorf("load session %s: redis: %w", session, unavailable(err))
	}
	if res[0] == nil || res[1] == nil {
		return 0, fmt.Errorf("load session %s: %w", session, ErrNotFound)
	}
	ver, err := strconv.ParseInt(res[0].(string), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("load session %s: bad version %q", session, res[0])
	}
	if err := json.Unmarshal([]byte(res[1].(string)), v); err != nil {
		return 0, fmt.Errorf("load session %s: decode state: %w", session, err)
	}
	return ver, nil
}

// SaveState writes v if the stored version is still expect (0 for a new
// session) and returns the new version; ErrConflict otherwise.
func (s *Store) SaveState(ctx context.Context, session string, expect int64, v any) (int64, error) {
	data, head, err := encodeState(v, expect+1)
	if err != nil {
		return 0, fmt.Errorf("save session %s: %w", session, err)
	}
	nv, err := casScript.Run(ctx, s.rdb, []string{s.key(session, "state")},
		strconv.FormatInt(expect, 10), data, s.ttlSeconds(), head).Int64()
	if err != nil {
		return 0, fmt.Errorf("save session %s: redis: %w", session, unavailable(err))
	}
	if nv < 0 {
		return 0, fmt.Errorf("save session %s at version %d: %w", session, expect, ErrConflict)
	}
	return nv, nil
}

var appendScript = redis.NewScript(`
local added = 0
for i = 2, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], '1') == 1 then
    redis.call('RPUSH', KEYS[1], ARGV[i+1])
    added = added + 1
  end
end
if added > 0 then redis.call('INCR', KEYS[3]) end
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], tonumber(ARGV[1])) end
return {added, tonumber(redis.call('GET', KEYS[3]) or '0')}
`)

// AppendUnits appends units to the context of scope (a task id). A unit
// whose id has ever been in that context is skipped, so a redelivered step
// that appends again changes nothing, and a unit that pruning or compaction
// removed does not come back. Every append that adds a unit bumps the
// context's version.
func (s *Store) AppendUnits(ctx context.Context, session, scope string, us ...units.Unit) error {
	if len(us) == 0 {
		return nil
	}
	args, err := s.unitArgs(session, scope, us)
	if err != nil {
		return err
	}
	if err := appendScript.Run(ctx, s.rdb, s.contextKeys(session, scope), args...).Err(); err != nil {
		return fmt.Errorf("append context %s/%s: redis: %w", session, scope, unavailable(err))
	}
	return nil
}

func (s *Store) contextKeys(session, scope string) []string {
	return []string{s.key(session, "ctx", scope), s.key(session, "ctxids", scope), s.key(session, "ctxver", scope)}
}

// unitArgs is the TTL followed by (id, encoded unit) pairs.
func (s *Store) unitArgs(session, scope string, us []units.Unit) ([]any, error) {
	args := []any{s.ttlSeconds()}
	for _, u := range us {
		if u.ID == "" {
			return nil, fmt.Errorf("write context %s/%s: unit without id", session, scope)
		}
		b, err := json.Marshal(u)
		if err != nil {
			return nil, fmt.Errorf("write context %s/%s: encode unit %s: %w", session, scope, u.ID, err)
		}
		args = append(args, u.ID, b)
	}
	return args, nil
}

var replaceScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[3])
if cur == false then cur = '0' end
if cur ~= ARGV[#ARGV] then return -1 end
redis.call('DEL', KEYS[1])
for i = 2, #ARGV - 1, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], '1')
  redis.call('RPUSH', KEYS[1], ARGV[i+1])
end
local nv = redis.call('INCR', KEYS[3])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], tonumber(ARGV[1])) end
return nv
`)

// ReplaceUnits replaces the context of scope with us if its version is
// still expect, and returns the new version; ErrConflict when the context
// changed since it was read (a step appended to it), so the caller reads
// it again and redoes its work rather than drop the new units.
func (s *Store) ReplaceUnits(ctx context.Context, session, scope string, expect int64, us []units.Unit) (int64, error) {
	args, err := s.unitArgs(session, scope, us)
	if err != nil {
		return 0, err
	}
	args = append(args, strconv.FormatInt(expect, 10))
	nv, err := replaceScript.Run(ctx, s.rdb, s.contextKeys(session, scope), args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("replace context %s/%s: redis: %w", session, scope, unavailable(err))
	}
	if nv < 0 {
		return 0, fmt.Errorf("replace context %s/%s at version %d: %w", session, scope, expect, ErrConflict)
	}
	return nv, nil
}

// Units returns the context of scope in order.
func (s *Store) Units(ctx context.Context, session, scope string) ([]units.Unit, error) {
	us, _, err := s.Context(ctx, session, scope)
	return us, err
}

// Context returns the context of scope in order with its version, read
// atomically, for ReplaceUnits.
func (s *Store) Context(ctx context.Context, session, scope string) ([]units.Unit, int64, error) {
	keys := s.contextKeys(session, scope)
	var lr *redis.StringSliceCmd
	var ver *redis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		lr = p.LRange(ctx, keys[0], 0, -1)
		ver = p.Get(ctx, keys[2])
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("load context %s/%s: redis: %w", session, scope, unavailable(err))
	}
	var version int64
	if v, err := ver.Result(); err == nil {
		if version, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, 0, fmt.Errorf("load context %s/%s: bad version %q", session, scope, v)
		}
	}
	raw := lr.Val()
	out := make([]units.Unit, 0, len(raw))
	for i, r := range raw {
		var u units.Unit
		if err := json.Unmarshal([]byte(r), &u); err != nil {
			return nil, 0, fmt.Errorf("load context %s/%s: unit %d: %w", session, scope, i, err)
		}
		out = append(out, u)
	}
	return out, version, nil
}

// PutArtifact stores content under an id derived from it, so storing the
// same output twice is one artifact.
func (s *Store) PutArtifact(ctx context.Context, session, content string) (string, error) {
	sum := sha256.Sum256([]byte(content))
	id := "a-" + hex.EncodeToString(sum[:8])
	if err := s.rdb.Set(ctx, s.key(session, "artifact", id), content, s.ttl).Err(); err != nil {
		return "", fmt.Errorf("store artifact for %s: redis: %w", session, unavailable(err))
	}
	return id, nil
}

// GetArtifact returns an artifact's content.
func (s *Store) GetArtifact(ctx context.Context, session, id string) (string, error) {
	v, err := s.rdb.Get(ctx, s.key(session, "artifact", id)).Result()
	if errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("artifact %s of %s: %w", id, session, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("artifact %s of %s: redis: %w", id, session, unavailable(err))
	}
	return v, nil
}

// JournalGet reads what step recorded under field into v; found is false
// when nothing was recorded. The journal of a step holds the LLM answer and
// each tool call's start and result, so a redelivered step reads them back
// instead of calling the model or running a command again.
func (s *Store) JournalGet(ctx context.Context, session string, step int, field string, v any) (found bool, err error) {
	key := s.key(session, "journal", strconv.Itoa(step))
	raw, err := s.rdb.HGet(ctx, key, field).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read journal %s %s: redis: %w", key, field, unavailable(err))
	}
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return false, fmt.Errorf("read journal %s %s: decode: %w", key, field, err)
	}
	return true, nil
}

// JournalPut records field for step. It is written before the effect is
// acknowledged to anyone, so a crash after it replays the recorded value.
func (s *Store) JournalPut(ctx context.Context, session string, step int, field string, v any) error {
	key := s.key(session, "journal", strconv.Itoa(step))
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write journal %s %s: encode: %w", key, field, err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, field, b)
		p.Expire(ctx, key, s.ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("write journal %s %s: redis: %w", key, field, unavailable(err))
	}
	return nil
}

// AppendWindow adds rec to the stuck window of a task, keeps the newest size
// records and returns them oldest first. Adding the same iteration twice
// replaces it, so redelivery does not count an iteration twice.
func (s *Store) AppendWindow(ctx context.Context, session, task string, rec events.IterationRecord, size int) ([]events.IterationRecord, error) {
	key := s.key(session, "stuck", task)
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("stuck window %s/%s: encode: %w", session, task, err)
	}
	score := strconv.Itoa(rec.Iteration)
	var rng *redis.StringSliceCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRemRangeByScore(ctx, key, score, score)
		p.ZAdd(ctx, key, redis.Z{Score: float64(rec.Iteration), Member: b})
		p.ZRemRangeByRank(ctx, key, 0, int64(-size-1))
		p.Expire(ctx, key, s.ttl)
		rng = p.ZRange(ctx, key, 0, -1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stuck window %s/%s: redis: %w", session, task, unavailable(err))
	}
	out := make([]events.IterationRecord, 0, len(rng.Val()))
	for _, r := range rng.Val() {
		var ir events.IterationRecord
		if err := json.Unmarshal([]byte(r), &ir); err != nil {
			return nil, fmt.Errorf("stuck window %s/%s: decode: %w", session, task, err)
		}
		out = append(out, ir)
	}
	return out, nil
}

// ClearWindow forgets a task's window (after a signal, so the same evidence
// does not fire twice), keeping records newer than after.
func (s *Store) ClearWindow(ctx context.Context, session, task string, upTo int) error {
	key := s.key(session, "stuck", task)
	if err := s.rdb.ZRemRangeByScore(ctx, key, "-inf", strconv.Itoa(upTo)).Err(); err != nil {
		return fmt.Errorf("clear stuck window %s/%s: redis: %w", session, task, unavailable(err))
	}
	return nil
}

// RecordUsage adds one LLM call's tokens to the session's usage by role.
func (s *Store) RecordUsage(ctx context.Context, session, role string, in, out int) error {
	key := s.key(session, "usage")
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, key, role+":input", int64(in))
		p.HIncrBy(ctx, key, role+":output", int64(out))
		p.HIncrBy(ctx, key, role+":calls", 1)
		p.Expire(ctx, key, s.ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("record usage %s/%s: redis: %w", session, role, unavailable(err))
	}
	return nil
}

// Usage returns the session's usage counters, e.g. "builder:input" -> 5200.
func (s *Store) Usage(ctx context.Context, session string) (map[string]int64, error) {
	raw, err := s.rdb.HGetAll(ctx, s.key(session, "usage")).Result()
	if err != nil {
		return nil, fmt.Errorf("usage of %s: redis: %w", session, unavailable(err))
	}
	return usageOf(raw), nil
}

func usageOf(raw map[string]string) map[string]int64 {
	out := make(map[string]int64, len(raw))
	for k, v := range raw {
		n, _ := strconv.ParseInt(v, 10, 64)
		out[k] = n
	}
	return out
}

// LoadCompaction reads the compaction history of a task (realised ratios,
// cooldowns, calls spent) into v; found is false before the first
// compaction.
func (s *Store) LoadCompaction(ctx context.Context, session, task string, v any) (found bool, err error) {
	key := s.key(session, "compaction", task)
	raw, err := s.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read compaction history %s: redis: %w", key, unavailable(err))
	}
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return false, fmt.Errorf("read compaction history %s: decode: %w", key, err)
	}
	return true, nil
}

// SaveCompaction writes the compaction history of a task.
func (s *Store) SaveCompaction(ctx context.Context, session, task string, v any) error {
	key := s.key(session, "compaction", task)
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("write compaction history %s: encode: %w", key, err)
	}
	if err := s.rdb.Set(ctx, key, b, s.ttl).Err(); err != nil {
		return fmt.Errorf("write compaction history %s: redis: %w", key, unavailable(err))
	}
	return nil
}

// cacheKey is shared by every session: the same payload compacted the same
// way is the same result whoever asks.
func (s *Store) cacheKey(key string) string { return s.prefix + ":cache:" + key }

// CachedCompaction returns a compaction result stored under key (a
// compaction.CacheKey).
func (s *Store) CachedCompaction(ctx context.Context, key string) (string, bool, error) {
	v, err := s.rdb.Get(ctx, s.cacheKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read compaction cache %s: redis: %w", key, unavailable(err))
	}
	return v, true, nil
}

// CacheCompaction stores a compaction result under key for ttl.
func (s *Store) CacheCompaction(ctx context.Context, key, result string, ttl time.Duration) error {
	if err := s.rdb.Set(ctx, s.cacheKey(key), result, ttl).Err(); err != nil {
		return fmt.Errorf("write compaction cache %s: redis: %w", key, unavailable(err))
	}
	return nil
}
