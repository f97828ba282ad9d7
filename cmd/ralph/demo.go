package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/demo"
	"github.com/ralphmesh/ralph/pkg/config"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

func newDemoCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a 2-task session end to end on an in-process mesh with a simulated model",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			ws, err := demo.Workspace()
			if err != nil {
				return err
			}
			prdPath := filepath.Join(filepath.Dir(ws), filepath.Base(ws)+"-prd.yaml")
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

`, baseURL, demo.BuilderModel, demo.CriticModel, demo.PrunerModel, prdPath, ws)
			}
			start, err := prepareSession(prdPath, ws, "")
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
					fmt.Fprintf(out, "  %s\n", n)
				}
				fmt.Fprintf(out, `
To run the same PRD with a real model, point Ralph mesh at any OpenAI-compatible endpoint:
  export RALPH_LLM_BASE_URL=https://api.openai.com/v1   # or OPENAI_BASE_URL; any compatible server
  export RALPH_LLM_API_KEY=sk-...                        # or OPENAI_API_KEY
  export RALPH_BUILDER_MODEL=gpt-4o RALPH_CRITIC_MODEL=gpt-4o-mini
  go run ./cmd/ralph run %s --workspace DIR
`, prdPath)
			}
			return runErr
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one event per line as JSON")
	return cmd
}
