package builder

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/sessionindex"
)

// This file is the builder's part in the session index and the team
// limits: what a state looks like in the index, and asking the limits.

// IndexState is the state people see a session in, for a phase.
func IndexState(p Phase) string {
	switch p {
	case PhaseCompleted:
		return sessionindex.StateCompleted
	case PhaseFailed:
		return sessionindex.StateFailed
	case PhaseEscalated:
		return sessionindex.StateEscalated
	case PhaseCancelled:
		return sessionindex.StateCancelled
	}
	return sessionindex.StateRunning
}

// Entry is st as the session index shows it, at version ver, with the
// model usage (store.Usage's "<role>:calls|input|output") and the time of
// the change; StartedAt is now too, and the index keeps the first one.
func Entry(st State, ver int64, usage map[string]int64, now time.Time) sessionindex.Entry {
	e := sessionindex.Entry{
		Summary: sessionindex.Summary{
			ID: st.Session, Team: teamOf(st), State: IndexState(st.Phase), Reason: st.Reason,
			Iterations: st.Iteration, Tokens: st.Tokens, StartedAt: now, UpdatedAt: now,
		},
		Workspace: st.Workspace, Limits: st.Limits, Phase: string(st.Phase), Step: st.Step, Version: ver,
		Tasks: make([]sessionindex.Task, len(st.Tasks)), Usage: map[string]sessionindex.RoleUsage{},
	}
	if t := st.CurrentTask(); t != nil {
		e.CurrentTask = t.ID
	}
	for i, t := range st.Tasks {
		subs := slices.Clone(t.Subtasks)
		if subs == nil {
			subs = []string{}
		}
		e.Tasks[i] = sessionindex.Task{ID: t.ID, Title: t.Title, Status: t.Status, ParentID: t.ParentID,
			Depth: t.Depth, Turns: t.Turns, Attempts: t.Attempts, Subtasks: subs}
	}
	for k, v := range usage {
		role, what, ok := strings.Cut(k, ":")
		if !ok {
			continue
		}
		u := e.Usage[role]
		switch what {
		case "calls":
			u.Calls = v
		case "input":
			u.InputTokens = v
		case "output":
			u.OutputTokens = v
		default:
			continue
		}
		e.Usage[role] = u
	}
	return e
}

// index shows st, saved at version ver, in the session index.
func (s *Service) index(ctx context.Context, st State, ver int64) error {
	if s.d.Index == nil {
		return nil
	}
	usage, err := s.d.Store.Usage(ctx, st.Session)
	if err != nil {
		return fmt.Errorf("index session %s: %w", st.Session, err)
	}
	return s.indexWith(ctx, st, ver, usage)
}

// indexWith is index with the session's usage read already. The entry is
// written at once when it shows something other than progress (the
// session's first entry from this replica, its end, a task's status, the
// current task), else at most every RALPH_BUILDER_INDEX_INTERVAL: the
// latest entry waits for the interval's end (indexPacer).
func (s *Service) indexWith(ctx context.Context, st State, ver int64, usage map[string]int64) error {
	if s.d.Index == nil {
		return nil
	}
	e := Entry(st, ver, usage, s.d.Clock())
	key := teamOf(st) + "." + st.Session
	if !s.indexing.hold(key, e, st.Done(), s.d.Config.IndexInterval, s.flushIndex) {
		return nil
	}
	if err := s.d.Index.Put(ctx, e); err != nil {
		s.indexing.failed(key)
		return err
	}
	if st.Done() {
		s.d.Index.Forget(teamOf(st), st.Session)
	}
	return nil
}

// flushIndex writes an entry that waited for its interval's end.
func (s *Service) flushIndex(e sessionindex.Entry) {
	ctx, cancel := context.WithTimeout(context.Background(), indexFlushTimeout)
	defer cancel()
	if err := s.d.Index.Put(ctx, e); err != nil {
		// The session's next change writes it again.
		s.d.Log.Warn("session index: a paced entry was not written", zap.String("session", e.ID), zap.Error(err))
	}
}

// indexFlushTimeout bounds the write of a paced entry.
const indexFlushTimeout = 10 * time.Second

// pacedSessions is how many sessions the pacer remembers before it drops
// those it no longer needs.
const pacedSessions = 4096

// indexPacer decides which index entries are written now and which wait:
// per session, when the last was written, what it showed apart from
// progress, and the entry waiting with its timer.
type indexPacer struct {
	mu       sync.Mutex
	sessions map[string]*paced
	closed   bool
}

type paced struct {
	wrote   time.Time
	shape   string
	pending *sessionindex.Entry
	timer   *time.Timer
}

// hold reports whether e is to be written now. Otherwise it keeps e as the
// session's pending entry, written by flush when interval has passed since
// the last write. A session that ended is forgotten.
func (p *indexPacer) hold(key string, e sessionindex.Entry, ended bool, interval time.Duration, flush func(sessionindex.Entry)) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sessions == nil {
		p.sessions = map[string]*paced{}
	}
	now := time.Now()
	if len(p.sessions) >= pacedSessions {
		// Sessions that ended on other replicas are never forgotten here
		// otherwise: drop those with nothing waiting whose interval is
		// over (their next entry is written at once, as a first one).
		for k, ps := range p.sessions {
			if ps.timer == nil && now.Sub(ps.wrote) >= interval {
				delete(p.sessions, k)
			}
		}
	}
	ps := p.sessions[key]
	if ps != nil && ps.pending != nil && e.Version < ps.pending.Version {
		// An entry older than the one waiting: its commit's commands ran
		// a later commit (a work-product commit) that held its entry
		// first. (One older than an entry written is the index's to
		// drop: sessionindex.Put keeps the newest version.)
		return false
	}
	shape := entryShape(e)
	if ended || p.closed || ps == nil || ps.shape != shape || now.Sub(ps.wrote) >= interval {
		if ps != nil && ps.timer != nil {
			ps.timer.Stop()
		}
		if ended || p.closed {
			delete(p.sessions, key)
		} else {
			p.sessions[key] = &paced{wrote: now, shape: shape}
		}
		return true
	}
	ps.pending = &e
	if ps.timer == nil {
		ps.timer = time.AfterFunc(interval-now.Sub(ps.wrote), func() {
			p.mu.Lock()
			if p.sessions[key] != ps || ps.pending == nil {
				p.mu.Unlock()
				return
			}
			e := *ps.pending
			ps.pending, ps.timer, ps.wrote = nil, nil, time.Now()
			p.mu.Unlock()
			flush(e)
		})
	}
	return false
}

// failed forgets the last write of key, which did not happen: the next
// entry is written at once.
func (p *indexPacer) failed(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ps := p.sessions[key]; ps != nil && ps.timer != nil {
		ps.timer.Stop()
	}
	delete(p.sessions, key)
}

// drain stops pacing: every pending entry is returned to be written now,
// and later entries are written at once.
func (p *indexPacer) drain() []sessionindex.Entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var out []sessionindex.Entry
	for key, ps := range p.sessions {
		if ps.timer != nil {
			ps.timer.Stop()
		}
		if ps.pending != nil {
			out = append(out, *ps.pending)
		}
		delete(p.sessions, key)
	}
	return out
}

// entryShape is what of e is more than progress: its state and reason, the
// current task, and each task's status, attempts and subtasks.
func entryShape(e sessionindex.Entry) string {
	var b strings.Builder
	b.WriteString(e.State)
	b.WriteByte(0)
	b.WriteString(e.Reason)
	b.WriteByte(0)
	b.WriteString(e.CurrentTask)
	for _, t := range e.Tasks {
		fmt.Fprintf(&b, "\x00%s\x00%s\x00%d\x00%s", t.ID, t.Status, t.Attempts, strings.Join(t.Subtasks, ","))
	}
	return b.String()
}

// admit says why a new session of team may not start, "" when it may.
func (s *Service) admit(ctx context.Context, team, session string) (string, error) {
	if s.d.Teams == nil {
		return "", nil
	}
	return s.d.Teams.Admit(ctx, team, session, s.d.Clock())
}

// exhausted says why team may not spend more tokens today, "" while it
// may.
func (s *Service) exhausted(ctx context.Context, team string) (string, error) {
	if s.d.Teams == nil {
		return "", nil
	}
	return s.d.Teams.Exhausted(ctx, team, s.d.Clock())
}
