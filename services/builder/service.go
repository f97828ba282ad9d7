package builder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/llm"
	"github.com/ralphmesh/ralph/pkg/memory"
	"github.com/ralphmesh/ralph/pkg/metrics"
	"github.com/ralphmesh/ralph/pkg/sandbox"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tools"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Name is the service name (and consumer name prefix).
const Name = "builder"

// Bus is what the builder needs of the event bus: publishing, its
// consumers, the dead letters of every service (the supervisor), and a
// session's last event of a type (to tell a lost state from a session that
// never started or already ended).
type Bus interface {
	Publish(ctx context.Context, env events.Envelope) error
	Run(ctx context.Context, service string, handlers map[events.Type]bus.Handler, o bus.RunOptions) error
	// MaxPayload is the largest event the server accepts: an iteration's
	// record is kept under it.
	MaxPayload() int64
	RunDeadLetters(ctx context.Context, service string, fn func(context.Context, bus.DeadLetter) error, o bus.RunOptions) error
	LastEvent(ctx context.Context, session string, typ events.Type) (events.Envelope, bool, error)
}

// Store is what the builder needs of Redis.
type Store interface {
	LoadState(ctx context.Context, session string, v any) (int64, error)
	SaveState(ctx context.Context, session string, expect int64, v any) (int64, error)
	AppendUnits(ctx context.Context, session, scope string, us ...units.Unit) error
	// Context is the context of scope with its version.
	Context(ctx context.Context, session, scope string) ([]units.Unit, int64, error)
	// Peek, Commit and JournalClaim make a step's few round trips: the
	// versions and the journal read together before the step, the
	// transition's writes sent together after it, and the start of a
	// command claimed once.
	Peek(ctx context.Context, session, scope string, step int) (store.Peek, error)
	Commit(ctx context.Context, c store.Commit) (store.Committed, error)
	JournalClaim(ctx context.Context, session string, step int, field string, v any) (bool, error)
	// JournalReply journals a model reply with its tokens, counted in the
	// session's usage under role in the same round trip. The builder's
	// model client therefore records no usage in Redis itself (the mesh
	// wires it so).
	JournalReply(ctx context.Context, session string, step int, field string, v any, role string, in, out int) error
	PutArtifact(ctx context.Context, session, content string) (string, error)
	GetArtifact(ctx context.Context, session, id string) (string, error)
	// LoadMemory reads the session's memory (pkg/memory), which the
	// summarizer writes; version 0 while there is none.
	LoadMemory(ctx context.Context, session string, v any) (int64, error)
	bus.Journal
	// The activity index the watchdog reads (store.Store's).
	MarkActive(ctx context.Context, session string, at time.Time) error
	MarkEnded(ctx context.Context, session string) error
	QuietSince(ctx context.Context, t time.Time, limit int) ([]store.Activity, error)
	LastActive(ctx context.Context, session string) (time.Time, bool, error)
	// Usage is the model usage of a session per role, for the index.
	Usage(ctx context.Context, session string) (map[string]int64, error)
}

// Index is the session index the builder keeps as sessions move
// (sessionindex.Index).
type Index interface {
	Put(ctx context.Context, e sessionindex.Entry) error
	End(ctx context.Context, team, session, state, reason string, at time.Time) error
	Forget(team, session string)
}

// TeamLimits holds each team to its limits (teams.Guard).
type TeamLimits interface {
	// Admit says why a new session of team may not start now ("" when
	// it may).
	Admit(ctx context.Context, team, session string, now time.Time) (string, error)
	// Exhausted says why team may not spend more tokens today ("" while
	// it may).
	Exhausted(ctx context.Context, team string, now time.Time) (string, error)
	// Spend records the tokens session spent at step, once per step
	// however often it is delivered.
	Spend(ctx context.Context, team, session string, step, tokens int, now time.Time) error
}

// Model is the builder's LLM.
type Model interface {
	Chat(ctx context.Context, session string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// TokenCounter counts context tokens.
type TokenCounter interface{ Count(text string) int }

// Deps are the builder's collaborators.
type Deps struct {
	Bus    Bus
	Store  Store
	Model  Model
	Tokens TokenCounter
	Clock  func() time.Time
	Log    *zap.Logger
	Config Config
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Sandbox runs the run tool's commands (probed by the wiring);
	// sandbox.Unconfined() only when the operator opted out.
	Sandbox *sandbox.Sandbox
	// Index, when set, is kept up to date with every session's state.
	Index Index
	// Teams, when set, holds each team to its limits.
	Teams TeamLimits
}

// Service runs the loop for every session it is handed.
type Service struct {
	d Deps
	// measure sizes a task's first request, to refuse a task that cannot
	// fit in the model's window.
	measure Measure
	// hasher is the workspace check's stat cache, shared by the sessions
	// this replica runs.
	hasher *tools.Hasher
	// sessions is what this replica keeps of each session between steps.
	sessions *sessionCache
	// indexing paces the session index's writes (RALPH_BUILDER_INDEX_INTERVAL).
	indexing indexPacer
}

// New builds the service; zero Config fields take their defaults.
func New(d Deps) *Service {
	if d.Clock == nil {
		d.Clock = time.Now
	}
	settings.FillZero(&d.Config)
	return &Service{d: d, measure: Measurer(d.Tokens, d.Config.MaxTokens).WithMemory(MemoryRoom(d.Tokens, d.Config.Memory)),
		hasher: tools.NewHasher(d.Config.HashCacheFiles), sessions: newSessionCache(d.Config.CacheSessions)}
}

// Run consumes the builder's events, supervises the dead letters of every
// service and runs the watchdog until ctx ends.
// It refuses to start without a sandbox for the agent's commands.
func (s *Service) Run(ctx context.Context) error {
	if s.d.Sandbox == nil {
		return errNoSandbox
	}
	if s.d.Config.HashWatch != "off" {
		if err := s.hasher.WatchChanges(); err != nil {
			s.d.Log.Warn("the workspace check lstat's every file at every step: watching for changes is not possible here", zap.Error(err))
		} else if s.d.Config.HashWatch == "host" {
			s.hasher.TrustHost()
		}
		defer s.hasher.Close()
	}
	o := s.d.Config.Run
	o.Ready = readyOnce(o.Ready, 2)
	// The supervisor's last word comes after RideOut (which is innermost)
	// has waited out an outage for the whole budget.
	supervisor := o
	supervisor.Middlewares = append([]bus.Middleware{bus.GiveUp(s.supervisorGaveUp)}, o.Middlewares...)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.d.Bus.RunDeadLetters(ctx, Name, s.onDeadLetter, supervisor) })
	g.Go(func() error { s.watch(ctx); return nil })
	g.Go(func() error { return s.runEvents(ctx, o) })
	err := g.Wait()
	// What waited for its interval is written before the replica goes.
	if s.d.Index != nil {
		for _, e := range s.indexing.drain() {
			s.flushIndex(e)
		}
	}
	return err
}

// runEvents consumes the builder's events until ctx ends.
func (s *Service) runEvents(ctx context.Context, o bus.RunOptions) error {
	return s.d.Bus.Run(ctx, Name, map[events.Type]bus.Handler{
		events.SessionStarted:     s.onStarted,
		events.IterationRequested: bus.GiveUp(s.failSession)(s.onIteration),
		events.IterationAnalyzed: applies(s, func(step int, d events.IterationAnalyzedData) Input {
			return Analyzed{Step: step, Data: d}
		}),
		events.CritiqueCompleted: applies(s, func(step int, d events.CritiqueCompletedData) Input {
			return Critiqued{Step: step, Data: d}
		}),
		events.PruneCompleted: applies(s, func(step int, d events.PruneCompletedData) Input {
			return Pruned{Step: step, Data: d}
		}),
		events.TaskDecomposed: applies(s, func(step int, d events.TaskDecomposedData) Input {
			return Decomposed{Step: step, Data: d, Measure: s.measure}
		}),
		events.SessionResumed: s.onResumed,
		events.CompactionCompleted: applies(s, func(step int, d events.CompactionCompletedData) Input {
			return Compacted{Step: step, Data: d}
		}),
		events.CancelRequested: applies(s, func(step int, d events.CancelRequestedData) Input {
			return Cancel{Step: step, Reason: d.Reason}
		}),
	}, o)
}

// onResumed applies a person's guidance. A session with a branch goes on
// from its last commit: the workspace is put back on the branch (a person
// may have switched away while it was paused), and a commit the person
// made on it meanwhile is taken as the new head.
func (s *Service) onResumed(ctx context.Context, env events.Envelope) error {
	d, err := events.DecodeAs[events.SessionResumedData](env)
	if err != nil {
		return err
	}
	var st State
	ver, err := s.d.Store.LoadState(ctx, env.Session, &st)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return s.stateGone(ctx, s.log(env), env.TeamOrDefault(), env.Session, env.Task, env.Step)
		}
		return err
	}
	in := Resumed{Step: env.Step, Data: d}
	if st.Git != nil && st.Phase == PhaseEscalated && st.Step == env.Step {
		repo, err := gitwork.Open(ctx, st.Workspace, s.d.Sandbox, s.d.Config.Git)
		if err == nil {
			in.Head, err = repo.Checkout(ctx, st.Git.Branch)
		}
		if err != nil {
			return bus.Permanent(fmt.Errorf("resume session %s on branch %s: %w", env.Session, st.Git.Branch, err))
		}
	}
	return s.commit(ctx, s.log(env), env.Session, st, ver, in)
}

// errNoSandbox is a wiring mistake: running the model's commands
// unconfined must be chosen (RALPH_SANDBOX_MODE=none), never a default.
var errNoSandbox = errors.New("builder: no sandbox for the agent's commands (Deps.Sandbox); pass sandbox.Unconfined() to run them unconfined")

// applies is the handler of an event that is one input of the state
// machine: decode its payload as its registered type, make the input, apply.
func applies[T any](s *Service, input func(step int, d T) Input) bus.Handler {
	return func(ctx context.Context, env events.Envelope) error {
		d, err := events.DecodeAs[T](env)
		if err != nil {
			return err
		}
		return s.apply(ctx, env, input(env.Step, d))
	}
}

func (s *Service) log(env events.Envelope) *zap.Logger {
	return s.d.Log.With(zap.String("session", env.Session), zap.String("team", env.TeamOrDefault()), zap.String("task", env.Task),
		zap.Int("step", env.Step), zap.String("event", env.ID))
}

// teamOf is the team a state belongs to.
func teamOf(st State) string {
	if st.Team == "" {
		return events.DefaultTeam
	}
	return st.Team
}

// otherTeam reports (and logs) an event of another team than the
// session's: session ids are one namespace, so a team's user could name
// another team's session, and its event must not touch it.
func (s *Service) otherTeam(env events.Envelope, st State) bool {
	if teamOf(st) == env.TeamOrDefault() {
		return false
	}
	s.log(env).Warn("ignoring an event of another team than the session's", zap.String("session_team", teamOf(st)))
	return true
}

func (s *Service) onStarted(ctx context.Context, env events.Envelope) error {
	d, err := events.DecodeAs[events.SessionStartedData](env)
	if err != nil {
		return err
	}
	var existing State
	ver, err := s.d.Store.LoadState(ctx, env.Session, &existing)
	switch {
	case err == nil:
		if s.otherTeam(env, existing) {
			return nil
		}
		// A duplicate start: finish whatever the first one began.
		if err := s.track(ctx, env.Session, existing, ver); err != nil {
			return err
		}
		return s.execute(ctx, existing.Pending)
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	team := env.TeamOrDefault()
	var st State
	var cmds []Command
	var at GitStart
	_, werr := tools.NewWorkspace(d.Workspace)
	if werr == nil && d.Git != nil {
		// Idempotent: a redelivered start finds the workspace on the
		// branch already.
		if at, werr = s.checkout(ctx, d.Workspace, *d.Git); werr != nil && (ctx.Err() != nil || bus.IsUnavailable(werr)) {
			return werr
		}
	}
	if werr != nil {
		st = State{Session: env.Session, Team: env.Team, Workspace: d.Workspace, Current: -1}
		cmds, _ = st.fail(fmt.Sprintf("workspace %s: %v", d.Workspace, werr), s.d.Clock())
	} else {
		st, cmds = StartAt(env.Team, env.Session, d, s.d.Config.Limits(), at, s.d.Clock())
		// Whoever published session.started, a task that cannot fit in the
		// model's window is refused before any of them starts, and so is
		// a session past its team's limits.
		if reason := st.Unfit(s.measure); reason != "" {
			cmds, _ = st.fail(reason, s.d.Clock())
		} else if reason, err := s.admit(ctx, team, env.Session); err != nil {
			return err
		} else if reason != "" {
			cmds, _ = st.fail(reason, s.d.Clock())
		}
	}
	st.Pending = cmds
	saved, err := s.d.Store.SaveState(ctx, env.Session, ver, st)
	if err != nil {
		return err
	}
	s.log(env).Info("session started", zap.Int("tasks", len(st.Tasks)), zap.String("workspace", d.Workspace))
	if err := s.track(ctx, env.Session, st, saved); err != nil {
		return err
	}
	return s.execute(ctx, cmds)
}

// apply feeds one input to the state machine, persists the new state with
// its commands under compare-and-set, then executes the commands. A stale
// input re-executes the commands of the transition that made it stale,
// which finishes the work of a replica that died between save and publish.
//
// The state is the copy this replica kept of the session, when it has
// one, unread: the compare-and-set of the save is the check that nobody wrote
// since, and anything but a successful save reads the state again.
func (s *Service) apply(ctx context.Context, env events.Envelope, in Input) error {
	return s.applyWith(ctx, env, in, nil)
}

// applyWith is apply with units to append to the context in the same
// round trip as the save (a step's new units).
func (s *Service) applyWith(ctx context.Context, env events.Envelope, in Input, app *appendUnits) error {
	snap, cached := s.sessions.get(env.Session)
	if !cached {
		var err error
		if snap, err = s.loadState(ctx, env.Session); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return s.stateGone(ctx, s.log(env), env.TeamOrDefault(), env.Session, env.Task, env.Step)
			}
			return err
		}
	}
	if s.otherTeam(env, snap.state) {
		return nil
	}
	return s.gone(ctx, env, s.commitFrom(ctx, s.log(env), env.Session, snap, cached, in, app))
}

// gone ends env's session as stateGone does when err says its state is
// gone, and is err otherwise.
func (s *Service) gone(ctx context.Context, env events.Envelope, err error) error {
	if errors.Is(err, errStateGone) {
		return s.stateGone(ctx, s.log(env), env.TeamOrDefault(), env.Session, env.Task, env.Step)
	}
	return err
}

// loadState reads the session's state from Redis, keeping the context
// this replica has of it (its version says whether it is still good).
func (s *Service) loadState(ctx context.Context, session string) (kept, error) {
	var st State
	ver, err := s.d.Store.LoadState(ctx, session, &st)
	if err != nil {
		s.sessions.forget(session)
		return kept{}, err
	}
	snap, _ := s.sessions.get(session)
	snap.state, snap.ver = st, ver
	s.sessions.put(session, snap)
	return snap, nil
}

func (s *Service) execute(ctx context.Context, cmds []Command) error {
	session := sessionOf(cmds)
	for _, c := range cmds {
		switch {
		case c.Commit != nil:
			// Its outcome is the next transition, which executes its own
			// commands.
			if err := s.runCommit(ctx, *c.Commit); err != nil {
				return err
			}
		case c.Append != nil:
			us := slices.Clone(c.Append.Units)
			if c.Append.Memory != nil {
				u, ok, err := s.memoryUnit(ctx, session, c.Append.Scope, c.Append.Memory)
				if err != nil {
					return err
				}
				if ok {
					us = append(us, u)
				}
			}
			for i := range us {
				if us[i].Tokens == 0 {
					us[i].Tokens = s.d.Tokens.Count(us[i].Content)
				}
			}
			if err := s.d.Store.AppendUnits(ctx, session, c.Append.Scope, us...); err != nil {
				return err
			}
		case c.Publish != nil:
			if err := s.d.Bus.Publish(ctx, *c.Publish); err != nil {
				return err
			}
		}
	}
	return nil
}

// memoryUnit is the session's memory as the unit a starting task gets
// after its instructions (memory.Unit), false when memory is off or holds
// nothing yet. The summarizer takes an approved task's learnings in on the
// task.completed the builder has just published, so the next task would
// nearly always start without them; it waits instead, up to
// RALPH_MEMORY_WAIT, for the memory to hold every task approved before it,
// then takes the memory as it stands. The wait is bounded so that a slow
// or absent summarizer delays a task, never stops it. A redelivered start
// may read a newer memory, but the store keeps the unit appended first
// (unit ids are appended once).
func (s *Service) memoryUnit(ctx context.Context, session, task string, req *MemoryRequest) (units.Unit, bool, error) {
	mc := s.d.Config.Memory
	if !mc.Enabled() {
		return units.Unit{}, false, nil
	}
	deadline := time.Now().Add(mc.MemoryWait)
	pause := 20 * time.Millisecond
	var mem memory.Memory
	for {
		mem = memory.Memory{}
		if _, err := s.d.Store.LoadMemory(ctx, session, &mem); err != nil {
			return units.Unit{}, false, err
		}
		left := time.Until(deadline)
		if mem.Covers(req.After) || left <= 0 {
			break
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return units.Unit{}, false, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
	if !mem.Covers(req.After) {
		s.d.Log.Warn("a task starts without the memory of every task approved before it: not ready in time (RALPH_MEMORY_WAIT)",
			zap.String("session", session), zap.String("task", task), zap.Strings("waited_for", req.After),
			zap.Strings("memory_has", mem.Tasks), zap.Duration("waited", mc.MemoryWait))
	}
	if strings.TrimSpace(mem.Text) == "" {
		return units.Unit{}, false, nil
	}
	u := memory.Unit(task, mem)
	u.Tokens = s.d.Tokens.Count(u.Content)
	return u, true, nil
}

// sessionOf finds the session of a command list; every transition publishes
// at least one event, which names it.
func sessionOf(cmds []Command) string {
	for _, c := range cmds {
		if c.Publish != nil {
			return c.Publish.Session
		}
	}
	return ""
}

// journaledReply is the LLM answer of a step as the journal keeps it.
type journaledReply struct {
	Content string       `json:"content"`
	Calls   []units.Call `json:"calls,omitempty"`
	Usage   events.Usage `json:"usage"`
}

// toolStart marks that a tool call began, so a redelivered step knows a
// shell command may already have had its effects.
type toolStart struct {
	At time.Time `json:"at"`
}

func (s *Service) onIteration(ctx context.Context, env events.Envelope) error {
	if _, err := events.DecodeAs[events.IterationRequestedData](env); err != nil {
		return err
	}
	snap, peek, err := s.current(ctx, env)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return s.stateGone(ctx, s.log(env), env.TeamOrDefault(), env.Session, env.Task, env.Step)
		}
		return err
	}
	st := snap.state
	if st.Phase != PhaseIterating || st.Step != env.Step {
		return s.execute(ctx, st.Pending)
	}
	// The team's tokens of the day are checked before the model is asked,
	// and what the step spent is counted (once) before it is applied.
	if reason, err := s.exhausted(ctx, teamOf(st)); err != nil {
		return err
	} else if reason != "" {
		return s.apply(ctx, env, LimitHit{Step: env.Step, Reason: reason})
	}
	rec, app, err := s.runStep(ctx, env, snap, peek)
	if err != nil {
		return err
	}
	if s.d.Teams != nil {
		if err := s.d.Teams.Spend(ctx, teamOf(st), env.Session, env.Step, rec.Usage.InputTokens+rec.Usage.OutputTokens, s.d.Clock()); err != nil {
			return err
		}
	}
	return s.gone(ctx, env, s.commitFrom(ctx, s.log(env), env.Session, snap.withContext(app.scope, app.base, app.baseVer), true,
		IterationDone{Step: env.Step, Record: rec}, &app))
}

// current is the session's state for a step, checked against Redis in one
// round trip with the step's journal and the version of the current
// task's context (store.Peek): the copy this replica kept when its version
// is still the one Redis holds, the state read again otherwise.
func (s *Service) current(ctx context.Context, env events.Envelope) (kept, store.Peek, error) {
	snap, cached := s.sessions.get(env.Session)
	if !cached {
		var err error
		if snap, err = s.loadState(ctx, env.Session); err != nil {
			return kept{}, store.Peek{}, err
		}
	}
	scope := ""
	if t := snap.state.CurrentTask(); t != nil {
		scope = t.ID
	}
	peek, err := s.d.Store.Peek(ctx, env.Session, scope, env.Step)
	if err != nil {
		return kept{}, store.Peek{}, err
	}
	if peek.StateVersion == snap.ver {
		return snap, peek, nil
	}
	if peek.StateVersion == 0 {
		s.sessions.forget(env.Session)
		return kept{}, store.Peek{}, fmt.Errorf("load session %s: %w", env.Session, store.ErrNotFound)
	}
	// Another replica (or another of this one's handlers) wrote since.
	if snap, err = s.loadState(ctx, env.Session); err != nil {
		return kept{}, store.Peek{}, err
	}
	if t := snap.state.CurrentTask(); t != nil && t.ID != scope {
		// The peeked context version is another task's: read it with
		// the context.
		peek.ContextVersion = -1
	}
	return snap, peek, nil
}

// appendUnits are a step's new units for the context of scope, and the
// context the step was given (base, at version baseVer), from which the
// context after the append follows without reading it.
type appendUnits struct {
	scope   string
	units   []units.Unit
	base    []units.Unit
	baseVer int64
}

// failSession ends the session of a step that cannot succeed: its error is
// permanent (a rejected API key, a missing workspace), or the step failed on
// every delivery JetStream allows (the model endpoint is down, say). The
// session fails with the reason rather than wait for a step that never
// comes.
func (s *Service) failSession(ctx context.Context, env events.Envelope, err error) error {
	reason := err.Error()
	if !bus.IsPermanent(err) {
		reason = fmt.Sprintf("step %d failed on its last delivery: %v", env.Step, err)
	}
	return s.abort(ctx, env, reason)
}

func (s *Service) abort(ctx context.Context, env events.Envelope, reason string) error {
	var st State
	ver, err := s.d.Store.LoadState(ctx, env.Session, &st)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return s.stateGone(ctx, s.log(env), env.TeamOrDefault(), env.Session, env.Task, env.Step)
		}
		return err
	}
	if st.Done() || st.Step != env.Step {
		return s.execute(ctx, st.Pending)
	}
	next := st
	cmds, _ := next.fail(reason, s.d.Clock())
	next.Pending = cmds
	saved, err := s.d.Store.SaveState(ctx, env.Session, ver, next)
	if err != nil {
		return err
	}
	s.log(env).Error("session aborted", zap.String("reason", reason))
	if err := s.track(ctx, env.Session, next, saved); err != nil {
		return err
	}
	return s.execute(ctx, cmds)
}

// runStep is one iteration: one LLM call with the task's context, then the
// tool calls it asked for. Every effect is journaled under the step.
//
// Its new units are returned to be appended with the state's save, in one
// round trip; the journal already holds what a redelivery needs to make
// them again.
func (s *Service) runStep(ctx context.Context, env events.Envelope, snap kept, peek store.Peek) (events.IterationRecord, appendUnits, error) {
	st := &snap.state
	t := st.CurrentTask()
	log := s.log(env)
	ws, err := tools.NewWorkspace(st.Workspace)
	if err != nil {
		return events.IterationRecord{}, appendUnits{}, bus.Permanent(fmt.Errorf("workspace %s: %w", st.Workspace, err))
	}
	ctxUnits, ctxVer := []units.Unit(nil), peek.ContextVersion
	if us, ok := snap.contextOf(t.ID, ctxVer); ok {
		ctxUnits = us
	} else if ctxUnits, ctxVer, err = s.d.Store.Context(ctx, env.Session, t.ID); err != nil {
		return events.IterationRecord{}, appendUnits{}, err
	}
	turn := t.Turns + 1
	journal := peekedJournal{Journal: s.d.Store, peek: peek, session: env.Session, step: env.Step}

	// The model's reply is journaled before any tool runs, together with
	// the tokens it cost (the session's usage): a redelivered step replays
	// it, and counts it once.
	var reply journaledReply
	if found, err := journal.JournalGet(ctx, env.Session, env.Step, "llm", &reply); err != nil {
		return events.IterationRecord{}, appendUnits{}, fmt.Errorf("recall llm of step %d: %w", env.Step, err)
	} else if found {
		log.Info("replaying journaled model reply")
	} else {
		if reply, err = s.ask(ctx, env.Session, ctxUnits); err != nil {
			return events.IterationRecord{}, appendUnits{}, err
		}
		if err := s.d.Store.JournalReply(ctx, env.Session, env.Step, "llm", reply, string(llm.RoleBuilder),
			reply.Usage.InputTokens, reply.Usage.OutputTokens); err != nil {
			return events.IterationRecord{}, appendUnits{}, fmt.Errorf("record llm of step %d: %w", env.Step, err)
		}
	}

	newUnits := []units.Unit{{
		ID: fmt.Sprintf("assistant-%d", env.Step), Role: openai.ChatMessageRoleAssistant, Kind: units.KindMessage,
		Content: reply.Content, Turn: turn, Calls: reply.Calls, Tokens: s.count(reply.Content, reply.Calls),
	}}
	rec := events.IterationRecord{
		Iteration: st.Iteration + 1, TaskID: t.ID, AssistantText: reply.Content,
		Usage: reply.Usage, ClaimedDone: len(reply.Calls) == 0, Compacted: st.JustCompacted,
	}
	// A page of read_file or read_artifact is what the context shows
	// inline, so a read comes back whole rather than as a pointer.
	opts := s.d.Config.Options
	opts.PageBytes = s.d.Config.InlineOutputBytes
	opts.Sandbox = s.d.Sandbox
	exec := tools.NewExecutor(ws, sessionArtifacts{s.d.Store, env.Session}, opts)
	for i, call := range reply.Calls {
		res, err := s.runTool(ctx, env, journal, exec, i, call)
		if err != nil {
			return events.IterationRecord{}, appendUnits{}, err
		}
		log.Info("tool call", zap.String("tool", call.Name), zap.Int("exit_code", res.ExitCode), zap.Bool("error", res.Error != ""))
		s.d.Metrics.ToolCall(call.Name, res.Error != "" || res.ExitCode != 0)
		content, artifact, err := s.toolContent(ctx, env.Session, call, res)
		if err != nil {
			return events.IterationRecord{}, appendUnits{}, err
		}
		newUnits = append(newUnits, units.Unit{
			ID: fmt.Sprintf("tool-%d-%d", env.Step, i), Role: openai.ChatMessageRoleTool, Kind: units.KindToolResult,
			Tool: call.Name, CallID: call.ID, Args: units.ArgsJSON(call.Args), Content: content, Turn: turn,
			Tokens: s.d.Tokens.Count(content), Artifact: artifact,
		})
		rec.ToolCalls = append(rec.ToolCalls, events.ToolCall{
			ID: call.ID, Name: call.Name, Args: units.ArgsJSON(call.Args),
			Output: res.Output, Error: res.Error, ExitCode: res.ExitCode,
		})
		for _, f := range res.FilesChanged {
			if !slices.Contains(rec.FilesChanged, f) {
				rec.FilesChanged = append(rec.FilesChanged, f)
			}
		}
	}
	app := appendUnits{scope: t.ID, units: newUnits, base: ctxUnits, baseVer: ctxVer}
	rec.ContextTokens = units.Total(ctxUnits) + units.Total(newUnits)
	if rec.WorkspaceHash, err = s.workspaceHash(ws.Root(), env.Session, t.ID, t.Attempts, env.Step, reply.Calls); err != nil {
		return events.IterationRecord{}, appendUnits{}, fmt.Errorf("hash workspace: %w", err)
	}
	rec, err = boundRecord(ctx, rec, s.d.Config.InlineOutputBytes, RecordBudget(s.d.Bus.MaxPayload()),
		func(ctx context.Context, content string) (string, error) {
			return s.d.Store.PutArtifact(ctx, env.Session, content)
		})
	if errors.Is(err, ErrRecordTooLarge) {
		// The journal replays the same calls: no delivery makes it fit.
		return rec, app, bus.Permanent(err)
	}
	return rec, app, err
}

// ask is the builder model's reply to the context us.
func (s *Service) ask(ctx context.Context, session string, us []units.Unit) (journaledReply, error) {
	msg, usage, err := llm.Reply(ctx, s.d.Model, session, llm.Request{
		Messages:  units.Messages(us),
		Tools:     tools.Definitions(),
		MaxTokens: s.d.Config.MaxTokens,
	})
	if err != nil {
		return journaledReply{}, fmt.Errorf("builder model: %w", err)
	}
	reply := journaledReply{Content: msg.Content, Usage: events.Usage{InputTokens: usage.PromptTokens, OutputTokens: usage.CompletionTokens}}
	for _, c := range msg.ToolCalls {
		reply.Calls = append(reply.Calls, units.Call{ID: c.ID, Name: c.Function.Name, Args: c.Function.Arguments})
	}
	return reply, nil
}

// workspaceHash is tools.Hash of the workspace as step left it. A step
// that ran no command and wrote nothing cannot have changed it: when this
// replica hashed the step before of the same attempt at the task, that
// digest stands without a walk. Otherwise the hasher re-reads only the files
// whose stat data changed, and, watching (RALPH_BUILDER_HASH_WATCH), lstat's
// only the directories the kernel reported changed since that step. A step
// after a review (a new attempt: the critic's verify command may have written
// on another host) or after the session moved between replicas lstat's
// everything.
func (s *Service) workspaceHash(root, session, task string, attempt, step int, calls []units.Call) (string, error) {
	tag := func(step int) string { return fmt.Sprintf("%s/%s/%d/%d", session, task, attempt, step) }
	if !slices.ContainsFunc(calls, func(c units.Call) bool { return tools.Mutates(c.Name) }) {
		if digest, ok := s.hasher.Carry(root, tag(step-1), tag(step)); ok {
			return digest, nil
		}
	}
	return s.hasher.HashSince(root, tag(step-1), tag(step))
}

// runTool executes call i of the step, or replays its journaled result. A
// shell command that started but whose result was never recorded (the
// replica died while it ran) is not run again: its effects are unknown, and
// the model is told so.
//
// The start is claimed (store.JournalClaim), not just written: of two
// deliveries of one step that race, one runs the command.
func (s *Service) runTool(ctx context.Context, env events.Envelope, journal bus.Journal, exec *tools.Executor, i int, call units.Call) (tools.Result, error) {
	run := func(ctx context.Context) (tools.Result, error) {
		res, err := exec.Execute(ctx, call.Name, call.Args)
		if err != nil {
			return res, fmt.Errorf("tool %s: %w", call.Name, err)
		}
		return res, nil
	}
	if !tools.Mutates(call.Name) {
		// A read (read_file, list_dir, search, read_artifact) changes
		// nothing: a redelivered step reads again, from the workspace the
		// journaled calls before it left, rather than keep every page it
		// read in the journal (a Redis write of up to a page per call).
		return run(ctx)
	}
	return bus.Once(ctx, journal, env, fmt.Sprintf("tool:%d", i), func(ctx context.Context) (tools.Result, error) {
		if call.Name == tools.Run {
			startKey := fmt.Sprintf("start:%d", i)
			var started toolStart
			found, err := journal.JournalGet(ctx, env.Session, env.Step, startKey, &started)
			if err != nil {
				return tools.Result{}, err
			}
			if !found {
				started = toolStart{At: s.d.Clock()}
				claimed, err := s.d.Store.JournalClaim(ctx, env.Session, env.Step, startKey, started)
				if err != nil {
					return tools.Result{}, err
				}
				if !claimed {
					if _, err := s.d.Store.JournalGet(ctx, env.Session, env.Step, startKey, &started); err != nil {
						return tools.Result{}, err
					}
				}
				found = !claimed
			}
			if found {
				return tools.Result{Error: fmt.Sprintf("this command was interrupted at %s when the builder replica running it stopped; "+
					"it was not run again because it may already have had effects. Check the workspace before running it again.",
					started.At.UTC().Format(time.RFC3339)), ExitCode: -1}, nil
			}
		}
		return run(ctx)
	})
}

// toolContent is what the model sees of a tool result. An output larger
// than InlineOutputBytes is stored whole as an artifact and replaced by a
// pointer with a digest of whole lines; the model can read it all back with
// read_artifact. Text is never cut mid-line.
func (s *Service) toolContent(ctx context.Context, session string, call units.Call, res tools.Result) (content, artifact string, err error) {
	text := res.Text(call.Name)
	if len(text) <= s.d.Config.InlineOutputBytes {
		return text, "", nil
	}
	id, err := s.d.Store.PutArtifact(ctx, session, text)
	if err != nil {
		return "", "", err
	}
	return tools.PointerDigest(text, id, s.d.Config.InlineOutputBytes/2), id, nil
}

func (s *Service) count(content string, calls []units.Call) int {
	n := s.d.Tokens.Count(content)
	for _, c := range calls {
		n += s.d.Tokens.Count(c.Name) + s.d.Tokens.Count(c.Args)
	}
	return n
}

// sessionArtifacts lets read_artifact reach the session's artifacts.
type sessionArtifacts struct {
	st      Store
	session string
}

func (a sessionArtifacts) GetArtifact(ctx context.Context, id string) (string, error) {
	v, err := a.st.GetArtifact(ctx, a.session, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("%w: %v", tools.ErrArtifactNotFound, err)
	}
	return v, err
}

// peekedJournal answers for the step it was peeked at from what the peek
// read (store.Peek holds the step's whole journal as it was when the step
// began), and from the store otherwise; writes go to the store.
type peekedJournal struct {
	bus.Journal
	peek    store.Peek
	session string
	step    int
}

func (j peekedJournal) JournalGet(ctx context.Context, session string, step int, field string, v any) (bool, error) {
	if session != j.session || step != j.step {
		return j.Journal.JournalGet(ctx, session, step, field, v)
	}
	return j.peek.JournalValue(field, v)
}
