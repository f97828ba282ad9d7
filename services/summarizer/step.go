package summarizer

import (
	"context"
	"fmt"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Compaction is what one compaction step planned and did.
type Compaction struct {
	// Plan is the plan carried out, the advisor's answer folded in.
	Plan compaction.Result
	// Outcome is what applying the plan did. When the plan has no ops its
	// Units are the stored units, unchanged.
	Outcome
}

// Compact is the summarizer's compaction step for one compaction.requested,
// without storage: the caller loads the task's stored units and History
// and saves what comes back (the service under compare-and-set, the
// benchmark in memory), so both run the same code. It moves hist to the
// request's iteration, plans with e.Options, asks the summarizer model to
// rank the plan's near ties when advise is set and the plan has some,
// commits the plan to hist, and applies it with the facts the stored units
// and the request's files give. An invalid plan input is a permanent error
// (bus.Permanent): no retry makes it valid. On an error from Apply the
// returned Compaction says what was done before it.
func (e *Executor) Compact(ctx context.Context, session string, req events.CompactionRequestedData, stored []units.Unit, hist *compaction.History, advise bool) (Compaction, error) {
	hist.StartIteration(max(req.Iteration, 1))
	doc := compaction.Document{LimitTokens: req.LimitTokens, CurrentTurn: req.Turn, Task: compaction.Task{Goal: req.Goal}, Units: stored}
	opts := e.Options
	opts.Advisor = advise
	plan, err := compaction.Plan(doc, opts, *hist)
	if err != nil {
		return Compaction{}, bus.Permanent(fmt.Errorf("plan compaction of %s: %w", req.TaskID, err))
	}
	if plan.Advisor.Status == compaction.AdvisorPending {
		// The planner stays pure: the model is asked here, and its answer
		// (or its failure) goes back through the planner's own checks.
		answer, err := askAdvisor(ctx, e.Model, session, plan.NearTies, opts.AdvisorTimeout)
		if err != nil {
			plan = compaction.AdviceFailed(plan, err, opts.AdvisorTimeout)
		} else {
			plan = compaction.ApplyAdvice(doc, opts, *hist, plan, answer)
		}
	}
	hist.Commit(plan)
	c := Compaction{Plan: plan, Outcome: Outcome{Units: stored}}
	if len(plan.Ops) == 0 {
		return c, nil
	}
	c.Outcome, err = e.Apply(ctx, session, req.TaskID, stored, plan, FactsOf(stored, req.FilesChanged), hist)
	return c, err
}
