package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

// LoadMemory decodes the session's memory (what its approved tasks learned,
// pkg/memory's Memory) into v and returns its version: 0, with v left as
// it is, while no task's learnings were stored.
func (s *Store) LoadMemory(ctx context.Context, session string, v any) (int64, error) {
	res, err := s.rdb.HMGet(ctx, s.key(session, "memory"), "version", "data").Result()
	if err != nil {
		return 0, fmt.Errorf("load memory of %s: redis: %w", session, unavailable(err))
	}
	if res[0] == nil || res[1] == nil {
		return 0, nil
	}
	ver, err := strconv.ParseInt(res[0].(string), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("load memory of %s: bad version %q", session, res[0])
	}
	if err := json.Unmarshal([]byte(res[1].(string)), v); err != nil {
		return 0, fmt.Errorf("load memory of %s: decode: %w", session, err)
	}
	return ver, nil
}

// SaveMemory writes v as the session's memory if its version is still
// expect (0 for the first) and returns the new version; ErrConflict when
// another task's learnings were stored meanwhile, so the caller reads the
// memory again and adds its own to that. It is the state's compare-and-set
// on a key of its own: the memory changes outside the builder's
// transitions.
func (s *Store) SaveMemory(ctx context.Context, session string, expect int64, v any) (int64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("save memory of %s: encode: %w", session, err)
	}
	nv, err := casScript.Run(ctx, s.rdb, []string{s.key(session, "memory")},
		strconv.FormatInt(expect, 10), data, s.ttlSeconds()).Int64()
	if err != nil {
		return 0, fmt.Errorf("save memory of %s: redis: %w", session, unavailable(err))
	}
	if nv < 0 {
		return 0, fmt.Errorf("save memory of %s at version %d: %w", session, expect, ErrConflict)
	}
	return nv, nil
}
