package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/internal/compactbench"
)

func newCompactBenchCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Replay a long drafting session through every compaction strategy and report what each costs and keeps",
		Long: `Generate a scripted drafting session of more than 60 builder iterations (twelve speaker profiles, then an
overview drawing on all of them) and replay it through five strategies: no compaction, plain truncation,
and the planner's legacy, tiered and tiered_adaptive modes carried out by the summarizer's executor
against a scripted summarizer model on 127.0.0.1. Print, for each: whether it completed, the builder's
input tokens, the share of them that repeats the previous prompt from its start (what a provider's
prompt cache can reuse), compactor LLM calls per iteration, time spent compacting and how many protected
facts the builder still sees at the end, then the tiered_adaptive targets. With --out, also write the report as
Markdown. Exits 1 when a tiered_adaptive target is missed.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := compactbench.Run(cmd.Context(), compactbench.Options{})
			if err != nil {
				return fmt.Errorf("compaction benchmark: %w", err)
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
				return exitError{code: 1, err: errors.New("compaction benchmark: a tiered_adaptive target was missed")}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "also write the report as Markdown to this file")
	return cmd
}
