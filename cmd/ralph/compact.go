package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/pkg/compaction"
)

func newCompactCmd() *cobra.Command {
	compact := &cobra.Command{Use: "compact", Short: "Compaction tools"}
	compact.AddCommand(&cobra.Command{
		Use:   "plan FILE",
		Short: "Print the compaction plan of a context document as JSON",
		Long: `Run the compaction planner (mode tiered_adaptive, default knobs, no history, no advisor) over a
context document (docs/REFERENCE.md) and print the plan as JSON: the tier, the token counts, every unit's lane,
the operations in the order they would be applied, and the units skipped with their reasons.
The same input always gives byte-identical output.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			data, err := os.ReadFile(a[0])
			if err != nil {
				return badInput("read context document: %v", err)
			}
			doc, err := compaction.DecodeDocument(data)
			if err != nil {
				return badInput("%s: %v", a[0], err)
			}
			plan, err := compaction.Plan(doc, compaction.DefaultOptions(), compaction.History{})
			if err != nil {
				return fmt.Errorf("plan %s: %w", a[0], err)
			}
			out, err := compaction.Encode(plan)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	})
	compact.AddCommand(newCompactBenchCmd())
	return compact
}
