package critic

import (
	"context"
	"fmt"
	"strings"

	"github.com/ralphmesh/ralph/pkg/gitwork"
)

// writeDiff adds the task's diff to the review prompt: what changed from
// the commit the task began at (base) to the work tree, committed
// subtasks' work included, as whole file sections within MaxDiffBytes,
// and the files beyond the bound by name and size. git only reads here,
// on the host, with everything that could run a program the workspace's
// configuration names turned off (pkg/gitwork).
func (s *Service) writeDiff(ctx context.Context, b *strings.Builder, workspace, base string) {
	short := base[:min(len(base), 12)]
	repo, err := gitwork.Open(ctx, workspace, nil, s.d.Config.Git)
	var d gitwork.Diff
	if err == nil {
		d, err = repo.Diff(ctx, base, s.d.Config.MaxDiffBytes)
	}
	if err != nil {
		fmt.Fprintf(b, "\nThe task's diff from commit %s could not be read: %v\n", short, err)
		return
	}
	if d.Files == 0 {
		fmt.Fprintf(b, "\nThe task's diff from commit %s to the work tree is empty: nothing changed.\n", short)
		return
	}
	fmt.Fprintf(b, "\nThe task's diff, from commit %s (where the task began) to the work tree, %d file(s):\n", short, d.Files)
	b.WriteString("----- begin diff -----\n")
	b.WriteString(d.Text)
	if !strings.HasSuffix(d.Text, "\n") && d.Text != "" {
		b.WriteString("\n")
	}
	b.WriteString("----- end diff -----\n")
	if len(d.Omitted) > 0 {
		fmt.Fprintf(b, "Not shown, past the diff's bound of %d bytes: %s\n", s.d.Config.MaxDiffBytes, strings.Join(d.Omitted, ", "))
	}
}
