package builder

import (
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/ralphmesh/ralph/pkg/units"
)

// This file is what a builder replica keeps of a session between its
// steps, so that a step reads from Redis only what changed. Nothing is
// acted on from it unchecked: a step first compares the versions Redis
// holds (store.Peek), and a transition is saved under compare-and-set on
// the version it was made from, so a replica that another one overtook
// reads the session again instead of acting on what it remembers.

// kept is a session as this replica last read or wrote it. Its slices
// are never written in place: a newer copy is a new value.
type kept struct {
	state State
	// ver is the version state was read or saved at.
	ver int64
	// scope, units and ctxVer are the context of one task (the current
	// one when it was taken) at version ctxVer; ctxVer 0 is no context.
	scope  string
	units  []units.Unit
	ctxVer int64
}

// withContext is s holding the context us of scope, read at version ver.
func (s kept) withContext(scope string, us []units.Unit, ver int64) kept {
	s.scope, s.units, s.ctxVer = scope, us, ver
	return s
}

// contextOf is the context of scope if s holds it at version ver.
func (s kept) contextOf(scope string, ver int64) ([]units.Unit, bool) {
	if s.ctxVer == 0 || s.scope != scope || s.ctxVer != ver {
		return nil, false
	}
	return s.units, true
}

// sessionCache holds the snapshots of the sessions this replica works on,
// the least recently used dropped beyond its size.
type sessionCache struct {
	mu sync.Mutex
	c  *lru.Cache[string, kept]
}

func newSessionCache(size int) *sessionCache {
	c, err := lru.New[string, kept](max(size, 1))
	if err != nil {
		// Only a size below 1, which max rules out.
		panic(err)
	}
	return &sessionCache{c: c}
}

func (c *sessionCache) get(session string) (kept, bool) { return c.c.Get(session) }

// put keeps s unless a newer version of the session's state is kept
// already (two handlers of one session finishing in either order).
func (c *sessionCache) put(session string, s kept) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.c.Peek(session); ok && old.ver > s.ver {
		return
	}
	c.c.Add(session, s)
}

func (c *sessionCache) forget(session string) { c.c.Remove(session) }
