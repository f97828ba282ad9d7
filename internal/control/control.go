// Package control owns what a person does to sessions, the same through
// the CLI and the console's HTTP API: start one from a PRD (validated,
// fitted to the builder model's window, within the team's limits, under an
// id no team uses), resume one that is escalated or cancelled, cancel one
// that runs, and look sessions up in the index. Every error says what was
// wrong in the words the CLI prints; its Kind says how an interface
// reports it (the CLI exits 2 for all of them, the API answers 400, 404,
// 409 or 429).
package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
	"github.com/ralphmesh/ralph/pkg/teams"
	"github.com/ralphmesh/ralph/services/builder"
)

// Kind is what sort of refusal an Error is.
type Kind int

const (
	// BadInput: the request is wrong (a PRD, a field, a session that
	// cannot take the action asked).
	BadInput Kind = iota + 1
	// NotFound: no session of the team has that id.
	NotFound
	// Conflict: the session id is taken.
	Conflict
	// Limit: the team is at one of its limits.
	Limit
)

// Error is a refusal: the request cannot be done as asked.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func refuse(k Kind, format string, a ...any) error {
	return &Error{Kind: k, Err: fmt.Errorf(format, a...)}
}

// KindOf is err's Kind, 0 when it is no refusal (a failure to reach NATS,
// say).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// Request is a session to start.
type Request struct {
	Team string
	PRD  prd.PRD
	// Source names the PRD in messages: its file, or "prd" for the API.
	Source string
	// Workspace is where the agent works: an absolute path, or relative to
	// the working directory when Local.
	Workspace string
	// Local: the workspace is on this host (the CLI), so it is checked
	// here; the API's console may run elsewhere, and the builder checks it.
	Local bool
	// Session is the id asked for; empty generates one.
	Session string
	// Limits, when set, are the session's own (the PRD's) under the
	// builder's defaults.
	Limits events.Limits
}

// Fit judges whether every task's first request fits in the builder
// model's window: builder.Measurer with the tokenizer and
// RALPH_BUILDER_MAX_TOKENS.
type Fit struct {
	Measure  builder.Measure
	Defaults events.Limits
}

// Prepare validates everything about a new session before anything is
// connected or published: the workspace, the session id, the team, and
// every task's first request within the builder model's window. It
// returns the session.started event to publish.
func Prepare(r Request, fit Fit, now time.Time) (events.Envelope, error) {
	if err := events.ValidTeam(r.Team); err != nil {
		return events.Envelope{}, refuse(BadInput, "%v", err)
	}
	ws, err := workspace(r)
	if err != nil {
		return events.Envelope{}, err
	}
	session := r.Session
	if session == "" {
		session = NewSessionID(now)
	}
	data := events.SessionStartedData{PRD: r.PRD, Workspace: ws, Limits: r.Limits}
	env, err := events.New(events.SessionStarted, session, "", 0, now, data)
	if err != nil {
		return events.Envelope{}, &Error{Kind: BadInput, Err: err}
	}
	st, _ := builder.Start(session, data, fit.Defaults, now)
	if reason := st.Unfit(fit.Measure); reason != "" {
		return events.Envelope{}, refuse(BadInput, "%s: %s (RALPH_BUILDER_CONTEXT_WINDOW, RALPH_BUILDER_MAX_TOKENS)", r.Source, reason)
	}
	return env.For(r.Team), nil
}

// workspace is r's workspace as an absolute path, checked when it is on
// this host.
func workspace(r Request) (string, error) {
	if r.Workspace == "" {
		if r.Local {
			return "", refuse(BadInput, "--workspace is required")
		}
		return "", refuse(BadInput, "workspace is required: the absolute path of the directory the agent works in")
	}
	if !r.Local {
		if !filepath.IsAbs(r.Workspace) {
			return "", refuse(BadInput, "workspace %s: must be an absolute path", r.Workspace)
		}
		return filepath.Clean(r.Workspace), nil
	}
	abs, err := filepath.Abs(r.Workspace)
	if err != nil {
		return "", refuse(BadInput, "--workspace %s: %v", r.Workspace, err)
	}
	if fi, err := os.Stat(abs); err != nil {
		return "", refuse(BadInput, "--workspace %s: %v", r.Workspace, err)
	} else if !fi.IsDir() {
		return "", refuse(BadInput, "--workspace %s: not a directory", r.Workspace)
	}
	return abs, nil
}

// NewSessionID is a fresh session id: the time and three random bytes.
func NewSessionID(now time.Time) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "s-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// Control does what people ask of sessions on one mesh.
type Control struct {
	// Bus is the mesh's bus; each call works through its team's bus
	// (Bus.ForTeam), so a NATS user limited to the team is enough.
	Bus    *bus.Bus
	Index  *sessionindex.Index
	Limits teams.Limits
	Clock  func() time.Time
}

func (c *Control) now() time.Time {
	if c.Clock != nil {
		return c.Clock()
	}
	return time.Now()
}

func (c *Control) team(team string) (*bus.Bus, error) {
	b, err := c.Bus.ForTeam(team)
	if err != nil {
		return nil, refuse(BadInput, "%v", err)
	}
	return b, nil
}

// Admit checks the team's limits for one more session: its running
// sessions and its tokens of the day, as the index shows them.
func (c *Control) Admit(ctx context.Context, team string) error {
	lim := c.Limits.For(team)
	if lim == (teams.Limit{}) {
		return nil
	}
	running, spent := 0, int64(0)
	var err error
	if lim.MaxSessions > 0 {
		if running, err = c.Index.Running(ctx, team); err != nil {
			return err
		}
	}
	day := teams.Day(c.now())
	if lim.MaxTokensPerDay > 0 {
		if spent, err = c.Index.TeamTokens(ctx, team, day); err != nil {
			return err
		}
	}
	if reason := lim.AdmitReason(team, running, spent, day); reason != "" {
		return refuse(Limit, "%s", reason)
	}
	return nil
}

// Start publishes start (Prepare's) once the team's limits allow one more
// session and its id is free on the mesh.
func (c *Control) Start(ctx context.Context, start events.Envelope) error {
	b, err := c.team(start.TeamOrDefault())
	if err != nil {
		return err
	}
	if err := c.Admit(ctx, start.TeamOrDefault()); err != nil {
		return err
	}
	if taken, err := b.SessionTaken(ctx, start.Session); err != nil {
		return err
	} else if taken {
		return refuse(Conflict, "session %s already exists on this mesh; pick another --session (or replay it with `ralph replay %s`)", start.Session, start.Session)
	}
	if err := b.Publish(ctx, start); err != nil {
		if errors.Is(err, bus.ErrTooLarge) {
			return refuse(BadInput, "the PRD is too large for this mesh: %v; make the PRD smaller (RALPH_PRD_MAX_BYTES bounds it)", err)
		}
		return err
	}
	return nil
}

// Position is where a session stands on the stream: the event that ended
// it (or paused it) last, unless it was resumed since, and its last event.
type Position struct {
	// End is the last terminal event not followed by a resume; its Type
	// is empty while the session runs.
	End events.Envelope
	// Last is the session's last event.
	Last events.Envelope
	// Resumed: a person resumed the session after it last paused.
	Resumed bool
}

// Locate replays session (of team) to find where it stands; an error of
// Kind NotFound when the team has no such session.
func (c *Control) Locate(ctx context.Context, team, session string) (Position, error) {
	if err := events.ValidSession(session); err != nil {
		return Position{}, &Error{Kind: BadInput, Err: err}
	}
	b, err := c.team(team)
	if err != nil {
		return Position{}, err
	}
	var p Position
	err = b.Replay(ctx, session, func(env events.Envelope) error {
		switch {
		case env.Type.Terminal():
			p.End, p.Resumed = env, false
		case env.Type == events.SessionResumed:
			p.End, p.Resumed = events.Envelope{}, true
		}
		p.Last = env
		return nil
	})
	if errors.Is(err, bus.ErrNoSession) {
		return Position{}, refuse(NotFound, "session %s: no events of team %s's sessions on this mesh", session, team)
	}
	return p, err
}

// Resume gives a session that is escalated or cancelled a person's
// guidance: it publishes session.resumed, which the builder applies.
func (c *Control) Resume(ctx context.Context, team, session, message string) (events.Envelope, error) {
	d := events.SessionResumedData{Message: message}
	if err := d.Validate(); err != nil {
		return events.Envelope{}, refuse(BadInput, "--message is required: the guidance the builder gets")
	}
	p, err := c.Locate(ctx, team, session)
	if err != nil {
		return events.Envelope{}, err
	}
	switch p.End.Type {
	case "":
		if p.Resumed {
			return events.Envelope{}, refuse(BadInput, "session %s was already resumed after it paused and is running", session)
		}
		return events.Envelope{}, refuse(BadInput, "session %s is still running, not escalated or cancelled", session)
	case events.SessionEscalated, events.SessionCancelled:
	default:
		return events.Envelope{}, refuse(BadInput, "session %s is not escalated or cancelled: it ended with %s", session, p.End.Type)
	}
	env, err := events.New(events.SessionResumed, session, p.End.Task, p.End.Step, c.now(), d)
	if err != nil {
		return events.Envelope{}, &Error{Kind: BadInput, Err: err}
	}
	env = env.For(team)
	if err := c.Bus.Publish(ctx, env); err != nil {
		return events.Envelope{}, err
	}
	return env, nil
}

// Cancel asks the builder to stop a session that runs or is escalated: it
// publishes cancel.requested; the builder answers session.cancelled.
func (c *Control) Cancel(ctx context.Context, team, session, reason string) (events.Envelope, error) {
	p, err := c.Locate(ctx, team, session)
	if err != nil {
		return events.Envelope{}, err
	}
	switch p.End.Type {
	case "", events.SessionEscalated:
	default:
		return events.Envelope{}, refuse(BadInput, "session %s already ended: %s", session, p.End.Type)
	}
	env, err := events.New(events.CancelRequested, session, p.Last.Task, p.Last.Step, c.now(), events.CancelRequestedData{Reason: reason})
	if err != nil {
		return events.Envelope{}, &Error{Kind: BadInput, Err: err}
	}
	env = env.For(team)
	if err := c.Bus.Publish(ctx, env); err != nil {
		return events.Envelope{}, err
	}
	return env, nil
}

// Get is the index's entry of session of team. A session the builder has
// not indexed yet (just started) is shown from its session.started: it
// runs, its tasks are pending.
func (c *Control) Get(ctx context.Context, team, session string) (sessionindex.Entry, error) {
	if err := events.ValidSession(session); err != nil {
		return sessionindex.Entry{}, &Error{Kind: BadInput, Err: err}
	}
	e, err := c.Index.Get(ctx, team, session)
	if err == nil || !errors.Is(err, sessionindex.ErrNotFound) {
		return e, err
	}
	b, err := c.team(team)
	if err != nil {
		return sessionindex.Entry{}, err
	}
	// Read through an ordered consumer of the team's session, which a NATS
	// user of the team may create, rather than a lookup by subject, which
	// would let it read any team's events.
	if exists, err := b.SessionExists(ctx, session); err != nil {
		return sessionindex.Entry{}, err
	} else if !exists {
		return sessionindex.Entry{}, refuse(NotFound, "session %s: no events of team %s's sessions on this mesh", session, team)
	}
	var first events.Envelope
	err = b.FollowFrom(ctx, session, bus.From{}, func(ev bus.Stored) (bool, error) {
		first = ev.Envelope
		return true, nil
	})
	if err != nil {
		return sessionindex.Entry{}, err
	}
	return Started(first), nil
}

// Started is the entry of a session known only by its session.started.
func Started(start events.Envelope) sessionindex.Entry {
	e := sessionindex.Entry{
		Summary: sessionindex.Summary{ID: start.Session, Team: start.TeamOrDefault(), State: sessionindex.StateRunning,
			StartedAt: start.Time, UpdatedAt: start.Time},
		Tasks: []sessionindex.Task{}, Usage: map[string]sessionindex.RoleUsage{},
	}
	if d, err := events.DecodeAs[events.SessionStartedData](start); err == nil {
		e.Workspace, e.Limits = d.Workspace, d.Limits
		for _, t := range d.PRD.Tasks {
			e.Tasks = append(e.Tasks, sessionindex.Task{ID: t.ID, Title: t.Title, Status: builder.TaskPending, Subtasks: []string{}})
		}
	}
	return e
}

// List is team's sessions, newest first.
func (c *Control) List(ctx context.Context, team string) ([]sessionindex.Entry, error) {
	if err := events.ValidTeam(team); err != nil {
		return nil, &Error{Kind: BadInput, Err: err}
	}
	return c.Index.List(ctx, team)
}
