package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/control"
	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/internal/watch"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/gitref"
	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/pkg/settings"
	"github.com/ralphmesh/ralph/pkg/store"
	"github.com/ralphmesh/ralph/pkg/tokens"
	"github.com/ralphmesh/ralph/services/builder"
	"github.com/ralphmesh/ralph/services/console"
	"github.com/ralphmesh/ralph/services/critic"
	"github.com/ralphmesh/ralph/services/decomposer"
	"github.com/ralphmesh/ralph/services/pruner"
	"github.com/ralphmesh/ralph/services/stuckdetector"
	"github.com/ralphmesh/ralph/services/summarizer"
)

func newRunCmd() *cobra.Command {
	var (
		workspace string
		asJSON    bool
		session   string
		gf        gitFlags
	)
	cmd := &cobra.Command{
		Use:   "run PRD --workspace DIR",
		Short: "Start a session and follow it live until it ends",
		Long: `Start a session for PRD (YAML, JSON, or a Ralph prd.json) in workspace DIR and follow it live.
DIR must be the top level of a git repository with a clean work tree (or --allow-dirty): the session
works on the PRD's branch (branch_name, branchName), else ralph/<slug of its title>, created from HEAD
or continued, and commits each approved task there. A prd.json must be inside DIR: each approved
story's passes becomes true in it, in the same commit as the work.
Uses the mesh at RALPH_NATS_URL, or runs an in-process mesh when none is set.
Exit 0: every task completed; 1: the session failed or was escalated; 2: bad input.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			start, err := prepareSession(cmd.Context(), cfg, a[0], workspace, session, gf)
			if err != nil {
				return err
			}
			log, err := newLogger(cfg, true)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			_, err = runSession(ctx, cfg, log, start, cmd.OutOrStdout(), asJSON, cfg.NATS.URL == "")
			return err
		},
	}
	cmd.Flags().StringVar(&workspace, "workspace", "", "directory the agent works in (required)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one event per line as JSON")
	cmd.Flags().StringVar(&session, "session", "", "session id (default: generated)")
	cmd.Flags().BoolVar(&gf.allowDirty, "allow-dirty", false, "start although the work tree has uncommitted changes (they go into the first task's commit)")
	cmd.Flags().StringVar(&gf.push, "push", "", "push the session's branch to this remote after each commit (default: nothing is pushed)")
	return cmd
}

// gitFlags are run's choices about the workspace's repository.
type gitFlags struct {
	allowDirty bool
	push       string
}

// prepareSession validates everything about a new session before anything
// is connected or published: the PRD within its bounds (RALPH_PRD_*), the
// workspace and its repository, the session id, the team (RALPH_TEAM), and
// every task's first request within the builder model's window.
func prepareSession(ctx context.Context, cfg config.Config, prdPath, workspace, session string, gf gitFlags) (events.Envelope, error) {
	f, err := cfg.PRD.LoadFile(prdPath)
	if err != nil {
		return events.Envelope{}, exitError{code: 2, err: err}
	}
	if len(f.Tasks) == 0 {
		return events.Envelope{}, badInput("%s: every story passes already; nothing to run (`ralph prd check %s` shows the plan)", prdPath, prdPath)
	}
	tok, err := tokens.New()
	if err != nil {
		return events.Envelope{}, fmt.Errorf("load the tokenizer: %w", err)
	}
	env, err := control.Prepare(control.Request{Team: cfg.Team, PRD: f.PRD, Source: prdPath, Workspace: workspace, Local: true, Session: session},
		control.Fit{Measure: builder.Measurer(tok, cfg.Builder.MaxTokens).WithMemory(builder.MemoryRoom(tok, cfg.Memory)), Defaults: cfg.Builder.Config.Limits()}, time.Now())
	if err != nil {
		return events.Envelope{}, refused(err)
	}
	data, err := events.DecodeAs[events.SessionStartedData](env)
	if err != nil {
		return events.Envelope{}, err
	}
	if data.Git, err = checkRepository(ctx, cfg, data.Workspace, prdPath, f, gf); err != nil {
		return events.Envelope{}, err
	}
	withGit, err := events.New(events.SessionStarted, env.Session, "", 0, env.Time, data)
	if err != nil {
		return events.Envelope{}, exitError{code: 2, err: err}
	}
	return withGit.For(env.Team), nil
}

// checkRepository checks the workspace's repository the session will
// commit to, and says how: the branch, the prd.json to write passes back
// to, the remote to push to. Git only reads here.
func checkRepository(ctx context.Context, cfg config.Config, ws, prdPath string, f prd.File, gf gitFlags) (*events.Git, error) {
	repo, err := gitwork.Open(ctx, ws, nil, cfg.Git)
	switch {
	case errors.Is(err, gitwork.ErrNotRepository):
		return nil, badInput("--workspace %s is not a git repository: a session commits each approved task on a branch of it; make it one (git init && git add -A && git commit -m 'initial commit')", ws)
	case errors.Is(err, gitwork.ErrNotTopLevel):
		return nil, badInput("--workspace %v; give the repository's top level as --workspace", err)
	case err != nil:
		return nil, badInput("--workspace %s: %v", ws, err)
	}
	if _, err := repo.Head(ctx); errors.Is(err, gitwork.ErrNoCommits) {
		return nil, badInput("--workspace %s: the repository has no commit yet, and the session's branch starts from HEAD; commit something first", ws)
	} else if err != nil {
		return nil, badInput("--workspace %s: %v", ws, err)
	}
	g := &events.Git{Branch: f.Branch}
	if g.Branch == "" {
		g.Branch = gitref.DefaultBranch(f.Title, strings.TrimSuffix(filepath.Base(prdPath), filepath.Ext(prdPath)))
	}
	if err := repo.CheckBranchName(ctx, g.Branch); err != nil {
		return nil, badInput("%s: %v", prdPath, err)
	}
	prdRel, prdErr := inside(repo.Dir(), prdPath)
	if f.Format == prd.FormatRalph {
		rel, err := prdRel, prdErr
		if err != nil {
			return nil, badInput("%s: %v; a prd.json's passes are written back in the same commit as the work, so it must be in the workspace %s (copy it there)", prdPath, err, ws)
		}
		g.PRDFile = rel
	}
	if gf.push != "" {
		if err := gitref.ValidRemote(gf.push); err != nil {
			return nil, badInput("--push: %v", err)
		}
		if ok, err := repo.HasRemote(ctx, gf.push); err != nil || !ok {
			return nil, badInput("--push %s: the repository at %s has no such remote (git remote -v lists them)", gf.push, ws)
		}
		g.Push = gf.push
	}
	changes, err := repo.Changes(ctx)
	if err != nil {
		return nil, badInput("--workspace %s: %v", ws, err)
	}
	// The session's own notes and its PRD are committed with its first
	// task.
	changes = slices.DeleteFunc(changes, func(c gitwork.Change) bool {
		return c.Path == builder.ProgressFile || (prdErr == nil && c.Path == prdRel)
	})
	if len(changes) > 0 && !gf.allowDirty {
		shown := make([]string, 0, 5)
		for _, c := range changes[:min(len(changes), 5)] {
			shown = append(shown, strings.TrimSpace(c.String()))
		}
		if len(changes) > 5 {
			shown = append(shown, fmt.Sprintf("and %d more", len(changes)-5))
		}
		return nil, badInput("the work tree of %s has uncommitted changes (%s): a session commits each task's changes, so they would be mixed in; commit or stash them, or pass --allow-dirty to carry them into the first task's commit",
			ws, strings.Join(shown, ", "))
	}
	return g, nil
}

// inside is path relative to the directory dir when it is in it (both
// taken without symlinks).
func inside(dir, path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(dir, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", fmt.Errorf("it is outside the workspace")
	}
	return filepath.ToSlash(rel), nil
}

// refused turns a refusal of package control (bad input, a session taken,
// a team limit) into exit 2; other errors are left as they are.
func refused(err error) error {
	if err != nil && control.KindOf(err) != 0 {
		return exitError{code: 2, err: err}
	}
	return err
}

// controlOf is what people do to sessions on m.
func controlOf(cfg config.Config, m *mesh.Mesh) (*control.Control, error) {
	limits, err := cfg.Teams.Limits()
	if err != nil {
		return nil, badInput("RALPH_TEAMS_LIMITS_FILE: %v", err)
	}
	return &control.Control{Bus: m.Bus, Index: m.Index, Limits: limits}, nil
}

// tally counts what a stretch of a session's events did.
type tally struct {
	// Branch and Commits are the session's work product.
	Branch     string
	Commits    []events.Commit
	Iterations int
	// Tokens are the builder's, from the iteration records.
	Tokens   int
	Approved int
	Rejected int
	Signals  int
}

// outcome is what a followed session ended with.
type outcome struct {
	Final events.Envelope
	// Part counts the events this command followed; Whole every event of
	// the session. They differ only after `ralph resume`, which follows the
	// part from the resume on.
	Part, Whole tally
	Elapsed     time.Duration
	// Usage is the model usage of the whole session; UsageBefore, after a
	// resume, what it was when the session was resumed.
	Usage, UsageBefore map[string]int64
	Resumed            bool
}

// resumePoint is where the part of a session that `ralph resume` follows
// begins: the session.resumed event, and the model usage recorded before it.
type resumePoint struct {
	EventID string
	Usage   map[string]int64
}

// runSession publishes session.started on the mesh (starting an in-process
// one when inProcess) and follows the session until it ends.
func runSession(ctx context.Context, cfg config.Config, log *zap.Logger, start events.Envelope, out io.Writer, asJSON, inProcess bool) (outcome, error) {
	begin := time.Now()
	m, err := mesh.Start(ctx, cfg, log, mesh.Options{Embed: inProcess, RandomPorts: true})
	if err != nil {
		return outcome{}, err
	}
	defer m.Close()
	svcCtx, stopServices := context.WithCancel(ctx)
	svcDone := make(chan error, 1)
	if inProcess {
		names := []string{builder.Name, critic.Name, stuckdetector.Name, pruner.Name, decomposer.Name, summarizer.Name}
		// Build every service before publishing, so a missing LLM endpoint
		// is reported before anything is started.
		for _, n := range names {
			if _, err := m.Service(n); err != nil {
				stopServices()
				return outcome{}, exitError{code: 2, err: err}
			}
		}
		go func() { svcDone <- m.RunServices(svcCtx, names...) }()
	} else {
		close(svcDone)
	}
	defer func() {
		stopServices()
		if err := <-svcDone; err != nil {
			log.Warn("services stopped with an error", zap.Error(err))
		}
	}()

	ctl, err := controlOf(cfg, m)
	if err != nil {
		return outcome{}, err
	}
	publish := func() error {
		if err := ctl.Start(ctx, start); err != nil {
			return refused(err)
		}
		if !asJSON {
			fmt.Fprintf(out, "session %s: %s\n", start.Session, where(m, inProcess))
		}
		return nil
	}
	return followSession(ctx, cfg, m, start.Session, publish, nil, out, asJSON, inProcess, begin)
}

// followSession runs publish (the start or the resume: once the notices
// about the session are heard), then prints the session's events live until
// it ends and turns the end into the exit status. After a resume (from is
// set, its EventID by publish), the events before the resume are history:
// they are counted for the whole session but not printed.
func followSession(ctx context.Context, cfg config.Config, m *mesh.Mesh, session string, publish func() error, from *resumePoint, out io.Writer, asJSON, inProcess bool, begin time.Time) (outcome, error) {
	var res outcome
	followCtx, cancel := context.WithTimeout(ctx, cfg.Run.Timeout)
	defer cancel()
	history := from != nil
	if from != nil {
		res.Resumed, res.UsageBefore = true, from.Usage
	}
	w, err := watcher(cfg, m)
	if err != nil {
		return res, err
	}
	var published error
	w.BeforeFollow = func() error {
		published = publish()
		return published
	}
	p := printer{out: out, json: asJSON}
	err = w.Run(followCtx, session, bus.From{}, func(ev bus.Stored) (bool, error) {
		env := ev.Envelope
		res.Whole.count(env)
		if history {
			if env.ID != from.EventID {
				return false, nil
			}
			history = false
		}
		if env.Type.Terminal() {
			// Events are not commands: an end the builder did not record
			// in the session's state (a forged or stray event) is not the
			// session's outcome.
			if ok, why := recorded(ctx, m, env); !ok {
				m.Log.Warn("ignoring an end of the session that its stored state does not show",
					zap.String("session", session), zap.String("event", env.ID), zap.String("why", why))
				if !asJSON {
					fmt.Fprintf(out, "[%s] ⚠ ignored %s at step %d: %s; it did not come from the builder, the session goes on\n",
						session, env.Type, env.Step, why)
				}
				return false, nil
			}
		}
		p.event(ev)
		res.Part.count(env)
		if env.Type.Terminal() {
			res.Final = env
		}
		return env.Type.Terminal(), nil
	}, func(s watch.Say) {
		if !history {
			p.say(s)
		}
	})
	if published != nil {
		return res, published
	}
	res.Elapsed = time.Since(begin)
	res.Usage, _ = m.Store.Usage(context.WithoutCancel(ctx), session)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return res, fmt.Errorf("session %s did not end within %s (RALPH_RUN_TIMEOUT)", session, cfg.Run.Timeout)
		}
		if ctx.Err() != nil {
			if inProcess {
				return res, fmt.Errorf("interrupted: session %s stopped with this process's in-process mesh", session)
			}
			return res, fmt.Errorf("interrupted: stopped following session %s; it goes on on the mesh (`ralph replay %s` shows it)", session, session)
		}
		return res, fmt.Errorf("follow session %s: %w", session, err)
	}
	if !asJSON {
		printSummary(out, session, res, inProcess)
	}
	switch res.Final.Type {
	case events.SessionCompleted:
		return res, nil
	case events.SessionFailed:
		var d events.SessionFailedData
		_ = res.Final.Decode(&d)
		return res, exitError{code: 1, err: fmt.Errorf("session %s failed: %s", session, console.Escape(d.Reason))}
	case events.SessionCancelled:
		var d events.SessionCancelledData
		_ = res.Final.Decode(&d)
		return res, exitError{code: 1, err: fmt.Errorf("session %s cancelled: %s; go on with `ralph resume %s --message \"...\"`",
			session, console.Escape(d.Reason), session)}
	default:
		var d events.SessionEscalatedData
		_ = res.Final.Decode(&d)
		return res, exitError{code: 1, err: fmt.Errorf("session %s escalated: %s (tried: %s); give guidance with `ralph resume %s --message \"...\"`",
			session, console.Escape(d.Reason), console.Escape(strings.Join(d.Tried, ", ")), session)}
	}
}

// recorded checks a terminal event against the session's stored state:
// the builder saves the state that ends a session before it publishes the
// end, so the state shows the same end. A failure is taken when the state
// is gone or cannot be read, since the builder fails such a session
// without its state (why says so in the log).
func recorded(ctx context.Context, m *mesh.Mesh, env events.Envelope) (ok bool, why string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	phase, step, err := builder.StoredPhase(ctx, m.Store, env.Session)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return env.Type == events.SessionFailed, "the session has no stored state"
	case err != nil:
		return env.Type == events.SessionFailed, fmt.Sprintf("the stored state could not be read: %v", err)
	case builder.Ends(phase, env.Type):
		return true, ""
	}
	return false, fmt.Sprintf("the stored state is %s at step %d", phase, step)
}

func where(m *mesh.Mesh, inProcess bool) string {
	if inProcess {
		return fmt.Sprintf("in-process mesh (NATS %s, Redis %s)", settings.MaskURL(m.NATSURL), settings.MaskURL(m.RedisURL))
	}
	return fmt.Sprintf("mesh at %s", settings.MaskURL(m.NATSURL))
}

func (t *tally) count(env events.Envelope) {
	switch env.Type {
	case events.SessionStarted:
		var d events.SessionStartedData
		if env.Decode(&d) == nil && d.Git != nil {
			t.Branch = d.Git.Branch
		}
	case events.TaskCompleted:
		var d events.TaskCompletedData
		if env.Decode(&d) == nil && d.Commit != nil {
			t.Commits = append(t.Commits, *d.Commit)
		}
	case events.IterationCompleted:
		var r events.IterationRecord
		if env.Decode(&r) == nil {
			t.Iterations++
			t.Tokens += r.Usage.InputTokens + r.Usage.OutputTokens
		}
	case events.IterationAnalyzed:
		var d events.IterationAnalyzedData
		if env.Decode(&d) == nil && d.Signal != nil {
			t.Signals++
		}
	case events.CritiqueCompleted:
		var d events.CritiqueCompletedData
		if env.Decode(&d) == nil {
			if d.Verdict.Approved {
				t.Approved++
			} else {
				t.Rejected++
			}
		}
	}
}

func (t tally) String() string {
	return fmt.Sprintf("iterations %d, builder tokens %d, critic verdicts %d approved / %d changes requested, stuck signals %d",
		t.Iterations, t.Tokens, t.Approved, t.Rejected, t.Signals)
}

// printCommits lists the session's commits, the work product.
func printCommits(out io.Writer, t tally) {
	if t.Branch == "" {
		return
	}
	fmt.Fprintf(out, "  commits on branch %s: %d\n", console.Escape(t.Branch), len(t.Commits))
	for _, c := range t.Commits {
		fmt.Fprintf(out, "    %s\n", console.Escape(console.CommitLine(c)))
	}
}

// modelRoles are the roles whose usage the summary shows, in this order.
var modelRoles = []string{"builder", "critic", "pruner", "decomposer", "summarizer"}

// usageLine is one role's calls and tokens in usage.
func usageLine(usage map[string]int64, role string) string {
	return fmt.Sprintf("%d calls, %d input / %d output tokens", usage[role+":calls"], usage[role+":input"], usage[role+":output"])
}

// printSummary closes a followed session. After a resume it says which
// figures are the resumed part's and which the whole session's, since the
// live output shows only the resumed part.
func printSummary(out io.Writer, session string, o outcome, inProcess bool) {
	if !o.Resumed {
		fmt.Fprintf(out, "\nsummary of %s: %s in %s\n", session, o.Final.Type, o.Elapsed.Round(time.Millisecond))
		fmt.Fprintf(out, "  %s\n", o.Part)
		for _, role := range modelRoles {
			if o.Usage[role+":calls"] > 0 {
				fmt.Fprintf(out, "  %s model: %s\n", role, usageLine(o.Usage, role))
			}
		}
	} else {
		part := make(map[string]int64, len(o.Usage))
		for k, v := range o.Usage {
			part[k] = v - o.UsageBefore[k]
		}
		fmt.Fprintf(out, "\nsummary of %s: %s, %s after the resume\n", session, o.Final.Type, o.Elapsed.Round(time.Millisecond))
		fmt.Fprintf(out, "  resumed part:  %s\n", o.Part)
		fmt.Fprintf(out, "  whole session: %s\n", o.Whole)
		for _, role := range modelRoles {
			if o.Usage[role+":calls"] > 0 {
				fmt.Fprintf(out, "  %s model: resumed part %s; whole session %s\n", role, usageLine(part, role), usageLine(o.Usage, role))
			}
		}
	}
	printCommits(out, o.Whole)
	if inProcess {
		fmt.Fprintf(out, "  (the in-process mesh ends with this command; run `ralph up` and set RALPH_NATS_URL to keep sessions replayable)\n")
	} else {
		fmt.Fprintf(out, "  replay it: ralph replay %s\n", session)
	}
}
