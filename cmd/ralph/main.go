// Command ralph is the one binary of Ralph mesh: it runs the services (all
// in one process or one at a time), starts and follows sessions, replays
// them from JetStream, and exposes the pure cores (stuck scan) as tools.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/ralphmesh/ralph/services/console"
)

// exitError carries an exit code: 1 for a session that failed or was
// escalated, 2 for bad input.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func badInput(format string, a ...any) error {
	return exitError{code: 2, err: fmt.Errorf(format, a...)}
}

func main() {
	os.Exit(report(os.Stderr, newRoot().Execute()))
}

// report prints err for people and returns the exit code it calls for: 0
// without an error, an exitError's own code, 1 otherwise.
func report(w io.Writer, err error) int {
	if err == nil {
		return 0
	}
	// The error may quote a model's text or a PRD's: its controls are
	// escaped like everything else printed.
	fmt.Fprintf(w, "ralph: %s\n", console.EscapeLines(err.Error()))
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "ralph",
		Short:         "Ralph mesh: a team agent platform that keeps LLM coding agents unstuck and within their context",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Flag and argument errors are bad input: exit 2.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitError{code: 2, err: err} })
	root.AddCommand(newUpCmd(), newServiceCmd(), newHealthCmd(), newRunCmd(), newResumeCmd(), newPRDCmd(), newCompactCmd(), newReplayCmd(), newStuckCmd(), newMemoryCmd(), newConfigCmd(), newDemoCmd(), newScriptLLMCmd(),
		newSessionsCmd(), newStatusCmd(), newCancelCmd(), newWatchCmd(), newDLQCmd(), newBenchCmd())
	return root
}

// args wraps a cobra positional-argument check so a wrong count exits 2.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return exitError{code: 2, err: fmt.Errorf("%s: %w", cmd.CommandPath(), err)}
		}
		return nil
	}
}
