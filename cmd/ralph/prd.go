package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/pkg/gitref"
	"github.com/ralphmesh/ralph/pkg/prd"
	"github.com/ralphmesh/ralph/services/console"
)

func newPRDCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prd",
		Short: "Work with PRD files (YAML, JSON or a Ralph prd.json)",
		Args:  args(cobra.NoArgs),
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a PRD and print the plan: its tasks in run order and what is skipped",
		Long: `Validate FILE (YAML, JSON, or a Ralph prd.json) as ralph run would, within RALPH_PRD_*, and print
the plan: the branch the session would work on, the tasks in the order they run (a prd.json's by
priority, then file order, each after its dependencies) and the stories skipped because they pass.
Exit 0: valid; 2: not (the error names the task or story, the field, the line and the column).`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			f, err := cfg.PRD.LoadFile(a[0])
			if err != nil {
				return exitError{code: 2, err: err}
			}
			printPlan(cmd.OutOrStdout(), a[0], f)
			return nil
		},
	})
	return cmd
}

// printPlan says what a session of f would do.
func printPlan(out io.Writer, path string, f prd.File) {
	branch := f.Branch
	if branch == "" {
		branch = gitref.DefaultBranch(f.Title, strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
	}
	what := map[string]string{prd.FormatYAML: "YAML PRD", prd.FormatJSON: "JSON PRD", prd.FormatRalph: "Ralph prd.json"}[f.Format]
	fmt.Fprintf(out, "%s: valid %s", console.Escape(path), what)
	if f.Title != "" {
		fmt.Fprintf(out, " %q", console.Escape(f.Title))
	}
	fmt.Fprintf(out, "\nbranch: %s\n", console.Escape(branch))
	order := f.RunOrder()
	fmt.Fprintf(out, "run order (%d task(s)):\n", len(order))
	for i, t := range order {
		var notes []string
		if p, ok := f.Priority[t.ID]; ok {
			notes = append(notes, fmt.Sprintf("priority %d", p))
		}
		if len(t.DependsOn) > 0 {
			notes = append(notes, "after "+strings.Join(t.DependsOn, ", "))
		}
		if t.Verify != "" {
			notes = append(notes, "verify: "+t.Verify)
		}
		line := fmt.Sprintf("  %d. %s: %s", i+1, t.ID, t.Title)
		if len(notes) > 0 {
			line += " (" + strings.Join(notes, "; ") + ")"
		}
		fmt.Fprintln(out, console.Escape(line))
	}
	if len(f.Skipped) > 0 {
		fmt.Fprintf(out, "skipped, passes already (%d):\n", len(f.Skipped))
		for _, t := range f.Skipped {
			fmt.Fprintln(out, console.Escape(fmt.Sprintf("  - %s: %s", t.ID, t.Title)))
		}
	}
	if len(order) == 0 {
		fmt.Fprintln(out, "nothing to run: ralph run would refuse it")
	}
}
