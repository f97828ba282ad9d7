package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/prd"
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
	)
	cmd := &cobra.Command{
		Use:   "run PRD --workspace DIR",
		Short: "Start a session and follow it live until it ends",
		Long: `Start a session for PRD (YAML or JSON) in workspace DIR and follow it live.
Uses the mesh at RALPH_NATS_URL, or runs an in-process mesh when none is set.
Exit 0: every task completed; 1: the session failed or was escalated; 2: bad input.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			start, err := prepareSession(a[0], workspace, session)
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
	return cmd
}

// prepareSession validates everything about a new session before anything
// is connected or published.
func prepareSession(prdPath, workspace, session string) (events.Envelope, error) {
	p, err := prd.Load(prdPath)
	if err != nil {
		return events.Envelope{}, exitError{code: 2, err: err}
	}
	if workspace == "" {
		return events.Envelope{}, badInput("--workspace is required")
	}
	abs, err := filepath.Abs(workspace)
	if err != nil {
		return events.Envelope{}, badInput("--workspace %s: %v", workspace, err)
	}
	if fi, err := os.Stat(abs); err != nil {
		return events.Envelope{}, badInput("--workspace %s: %v", workspace, err)
	} else if !fi.IsDir() {
		return events.Envelope{}, badInput("--workspace %s: not a directory", workspace)
	}
	if session == "" {
		session = newSessionID(time.Now())
	}
	env, err := events.New(events.SessionStarted, session, "", 0, time.Now(),
		events.SessionStartedData{PRD: p, Workspace: abs})
	if err != nil {
		return events.Envelope{}, exitError{code: 2, err: err}
	}
	return env, nil
}

func newSessionID(now time.Time) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "s-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// outcome is what a followed session ended with.
type outcome struct {
	Final      events.Envelope
	Iterations int
	Tokens     int
	Approved   int
	Rejected   int
	Signals    int
	Elapsed    time.Duration
	Usage      map[string]int64
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

	if exists, err := m.Bus.SessionExists(ctx, start.Session); err != nil {
		return outcome{}, err
	} else if exists {
		return outcome{}, badInput("session %s already exists on this mesh; pick another --session (or replay it with `ralph replay %s`)", start.Session, start.Session)
	}
	if !asJSON {
		fmt.Fprintf(out, "session %s: %s\n", start.Session, where(m, inProcess))
	}
	if err := m.Bus.Publish(ctx, start); err != nil {
		return outcome{}, err
	}
	return followSession(ctx, cfg, m, start.Session, "", out, asJSON, inProcess, begin)
}

// followSession prints the session's events live until it ends and turns
// the end into the exit status. When after is set, the events before the
// one with that id are history: they are not printed or counted.
func followSession(ctx context.Context, cfg config.Config, m *mesh.Mesh, session, after string, out io.Writer, asJSON, inProcess bool, begin time.Time) (outcome, error) {
	var res outcome
	followCtx, cancel := context.WithTimeout(ctx, cfg.Run.Timeout)
	defer cancel()
	history := after != ""
	err := m.Bus.Follow(followCtx, session, func(env events.Envelope) (bool, error) {
		if history {
			if env.ID != after {
				return false, nil
			}
			history = false
		}
		if asJSON {
			b, _ := json.Marshal(env)
			fmt.Fprintln(out, string(b))
		} else if line := console.Render(env); line != "" {
			fmt.Fprintln(out, line)
		}
		res.count(env)
		return env.Type.Terminal(), nil
	})
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
		return res, exitError{code: 1, err: fmt.Errorf("session %s failed: %s", session, d.Reason)}
	default:
		var d events.SessionEscalatedData
		_ = res.Final.Decode(&d)
		return res, exitError{code: 1, err: fmt.Errorf("session %s escalated: %s (tried: %s); give guidance with `ralph resume %s --message \"...\"`",
			session, d.Reason, strings.Join(d.Tried, ", "), session)}
	}
}

func where(m *mesh.Mesh, inProcess bool) string {
	if inProcess {
		return fmt.Sprintf("in-process mesh (NATS %s, Redis %s)", m.NATSURL, m.RedisURL)
	}
	return fmt.Sprintf("mesh at %s", m.NATSURL)
}

func (o *outcome) count(env events.Envelope) {
	switch env.Type {
	case events.IterationCompleted:
		var r events.IterationRecord
		if env.Decode(&r) == nil {
			o.Iterations++
			o.Tokens += r.Usage.InputTokens + r.Usage.OutputTokens
		}
	case events.IterationAnalyzed:
		var d events.IterationAnalyzedData
		if env.Decode(&d) == nil && d.Signal != nil {
			o.Signals++
		}
	case events.CritiqueCompleted:
		var d events.CritiqueCompletedData
		if env.Decode(&d) == nil {
			if d.Verdict.Approved {
				o.Approved++
			} else {
				o.Rejected++
			}
		}
	}
	if env.Type.Terminal() {
		o.Final = env
	}
}

func printSummary(out io.Writer, session string, o outcome, inProcess bool) {
	fmt.Fprintf(out, "\nsummary of %s: %s in %s\n", session, o.Final.Type, o.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(out, "  iterations %d, LLM tokens %d, critic verdicts %d approved / %d changes requested, stuck signals %d\n",
		o.Iterations, o.Tokens, o.Approved, o.Rejected, o.Signals)
	for _, role := range []string{"builder", "critic", "pruner", "decomposer", "summarizer"} {
		if calls := o.Usage[role+":calls"]; calls > 0 {
			fmt.Fprintf(out, "  %s model: %d calls, %d input / %d output tokens\n", role, calls, o.Usage[role+":input"], o.Usage[role+":output"])
		}
	}
	if inProcess {
		fmt.Fprintf(out, "  (the in-process mesh ends with this command; run `ralph up` and set RALPH_NATS_URL to keep sessions replayable)\n")
	} else {
		fmt.Fprintf(out, "  replay it: ralph replay %s\n", session)
	}
}
