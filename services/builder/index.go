package builder

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

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

// indexWith is index with the session's usage read already.
func (s *Service) indexWith(ctx context.Context, st State, ver int64, usage map[string]int64) error {
	if s.d.Index == nil {
		return nil
	}
	if err := s.d.Index.Put(ctx, Entry(st, ver, usage, s.d.Clock())); err != nil {
		return err
	}
	if st.Done() {
		s.d.Index.Forget(teamOf(st), st.Session)
	}
	return nil
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
