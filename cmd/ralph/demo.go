package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/demo"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/gitwork"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
	"github.com/ralphmesh/ralph/services/console"
)

func newDemoCmd() *cobra.Command {
	var asJSON, keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: demoShort(),
		Long: demoShort() + `.
The workspace and the PRD are made in a temporary directory, which is removed at the end
unless --keep is given.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			script, err := demo.Script()
			if err != nil {
				return err
			}
			llmServer := scriptllm.New(script)
			baseURL, err := llmServer.Start()
			if err != nil {
				return err
			}
			defer llmServer.Close()
			dir, err := os.MkdirTemp("", "ralph-demo-")
			if err != nil {
				return fmt.Errorf("demo directory: %w", err)
			}
			defer func() {
				if keep {
					return
				}
				if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
					err = fmt.Errorf("remove the demo directory: %w", rmErr)
				}
			}()
			ws, prdPath := filepath.Join(dir, "workspace"), filepath.Join(dir, "prd.yaml")
			if err := demo.Workspace(ws); err != nil {
				return err
			}
			if err := os.WriteFile(prdPath, demo.PRDYAML(), 0o644); err != nil {
				return fmt.Errorf("write demo PRD: %w", err)
			}

			// The demo always runs its own in-process mesh against the
			// simulated model, whatever the environment points at.
			cfg.NATS.URL, cfg.Redis.URL = "", ""
			cfg.LLM.BaseURL, cfg.LLM.APIKey = baseURL, ""
			cfg.Builder.BaseURL, cfg.Builder.APIKey, cfg.Builder.Model = "", "", demo.BuilderModel
			cfg.Critic.BaseURL, cfg.Critic.APIKey, cfg.Critic.Model = "", "", demo.CriticModel
			cfg.Pruner.BaseURL, cfg.Pruner.APIKey, cfg.Pruner.Model = "", "", demo.PrunerModel
			for _, r := range []*config.Role{&cfg.Decomposer.Role, &cfg.Summarizer} {
				// Not called by the demo's PRD; kept off any real endpoint.
				r.BaseURL, r.APIKey = "", ""
			}

			if !asJSON {
				fmt.Fprintf(out, `Ralph mesh demo
  The model is SIMULATED: a scripted OpenAI-compatible server at %s answers
  for the builder (%s), the critic (%s) and the context pruner (%s).
  Nothing leaves this machine. Task T3 shows a builder stuck in a loop being
  noticed and unstuck.
  PRD:       %s
  workspace: %s (a fresh git repository)
  %s

`, baseURL, demo.BuilderModel, demo.CriticModel, demo.PrunerModel, prdPath, ws, keepNote(keep, dir))
			} else if keep {
				// stdout is events only; where they are kept goes to stderr.
				fmt.Fprintf(cmd.ErrOrStderr(), "ralph demo: %s\n", keepNote(keep, dir))
			}
			start, err := prepareSession(cmd.Context(), cfg, prdPath, ws, "", gitFlags{})
			if err != nil {
				return err
			}
			log, err := newLogger(cfg, true)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			_, runErr := runSession(ctx, cfg, log, start, out, asJSON, true)
			if !asJSON {
				fmt.Fprintf(out, "\nworkspace files now:\n")
				entries, _ := os.ReadDir(ws)
				names := make([]string, 0, len(entries))
				for _, e := range entries {
					if e.Name() != ".git" {
						names = append(names, e.Name())
					}
				}
				sort.Strings(names)
				for _, n := range names {
					// The model named these files.
					fmt.Fprintf(out, "  %s\n", console.Escape(n))
				}
				printBranchLog(cmd.Context(), out, cfg, ws, start)
				prdArg := prdPath
				if !keep {
					prdArg = "PRD"
				}
				fmt.Fprintf(out, `
To run the same PRD with a real model, point Ralph mesh at any OpenAI-compatible endpoint:
  export RALPH_LLM_BASE_URL=https://api.openai.com/v1   # or OPENAI_BASE_URL; any compatible server
  export RALPH_LLM_API_KEY=sk-...                        # or OPENAI_API_KEY
  export RALPH_BUILDER_MODEL=gpt-4o RALPH_CRITIC_MODEL=gpt-4o-mini
  go run ./cmd/ralph run %s --workspace DIR
  %s
`, prdArg, keepNote(keep, dir))
			}
			return runErr
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one event per line as JSON")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the demo's workspace and PRD after it ends (their directory is printed)")
	return cmd
}

// printBranchLog shows the session's work product as git shows it: `git
// log --oneline` of its branch.
func printBranchLog(ctx context.Context, out io.Writer, cfg config.Config, ws string, start events.Envelope) {
	d, err := events.DecodeAs[events.SessionStartedData](start)
	if err != nil || d.Git == nil {
		return
	}
	repo, err := gitwork.Open(ctx, ws, nil, cfg.Git)
	var log []gitwork.LogLine
	if err == nil {
		log, err = repo.Log(ctx, d.Git.Branch, 20)
	}
	if err != nil {
		fmt.Fprintf(out, "\ngit log of branch %s: %v\n", d.Git.Branch, err)
		return
	}
	fmt.Fprintf(out, "\ngit log --oneline %s:\n", d.Git.Branch)
	for _, l := range log {
		fmt.Fprintf(out, "  %s %s\n", l.SHA[:min(len(l.SHA), 7)], console.Escape(l.Subject))
	}
}

// demoShort says what the demo runs, counting the tasks of the PRD it
// ships so that the help cannot drift from it.
func demoShort() string {
	p, err := demo.PRD()
	if err != nil {
		// The embedded PRD is parsed by the tests; this is not reached.
		return "Run a session end to end on an in-process mesh with a simulated model"
	}
	return fmt.Sprintf("Run a %d-task session end to end on an in-process mesh with a simulated model", len(p.Tasks))
}

// keepNote says what becomes of the demo's directory.
func keepNote(keep bool, dir string) string {
	if keep {
		return "The PRD and the workspace stay in " + dir + " (--keep)."
	}
	return "The PRD and the workspace are removed when the demo ends; ralph demo --keep keeps them\n  (the PRD is internal/demo/prd.yaml in the source)."
}
