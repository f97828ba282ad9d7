package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/memorybench"
)

func newMemoryCmd() *cobra.Command {
	mem := &cobra.Command{Use: "memory", Short: "Tools for the session memory that carries what one task learned into the next"}
	mem.AddCommand(newMemoryBenchCmd())
	return mem
}

// maxBenchTasks bounds --tasks: the figures do not change in kind past a
// few tasks, and each task is a few sessions' worth of events.
const maxBenchTasks = 50

func newMemoryBenchCmd() *cobra.Command {
	var out string
	var tasks int
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run a multi-task session with memory off and on and report the iterations and tokens of each",
		Long: `Run a session of --tasks tasks twice on an in-process mesh (embedded NATS and Redis, every service) against a
scripted builder, critic and summarizer on 127.0.0.1: once with RALPH_MEMORY=off, once with it on. Every
task needs a fact only exploring finds (the workspace's report generator fails unless FOO=1 is set, and
its error points to NOTES.md), so without memory every task finds it out again, and with memory only the
first does. Print the builder's iterations, each role's tokens, the memory's size and re-summaries, and the
ratios; with --out, also write the report as Markdown (docs/memory-benchmark.md). The other RALPH_MEMORY_*
settings apply. Exit 1 when a session does not complete or memory does not save iterations.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tasks < 2 || tasks > maxBenchTasks {
				return badInput("--tasks %d: must be between 2 and %d (a later task must be able to use what an earlier one found out)", tasks, maxBenchTasks)
			}
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			// Its own in-process mesh, whatever the environment points at.
			cfg.NATS.URL, cfg.Redis.URL = "", ""
			log, err := newLogger(cfg, true)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rep, err := memorybench.Run(ctx, cfg, memorybench.Options{Tasks: tasks, Log: log})
			if err != nil {
				return fmt.Errorf("memory benchmark: %w", err)
			}
			if err := rep.WriteTable(cmd.OutOrStdout()); err != nil {
				return err
			}
			if out != "" {
				var md bytes.Buffer
				if err := rep.WriteMarkdown(&md); err != nil {
					return err
				}
				if dir := filepath.Dir(out); dir != "." {
					if err := os.MkdirAll(dir, 0o755); err != nil {
						return fmt.Errorf("write report: %w", err)
					}
				}
				if err := os.WriteFile(out, md.Bytes(), 0o644); err != nil {
					return fmt.Errorf("write report: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "\nreport written to %s\n", out)
			}
			if !rep.Passed() {
				return exitError{code: 1, err: errors.New("memory benchmark: a session did not complete, or memory did not save iterations")}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&tasks, "tasks", memorybench.DefaultTasks, "tasks in the session")
	cmd.Flags().StringVar(&out, "out", "", "also write the report as Markdown to this file")
	return cmd
}
