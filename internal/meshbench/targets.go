package meshbench

import (
	"fmt"
	"io"
	"time"
)

// Target is one of issue 13's targets, checked against a report.
type Target struct {
	Name string
	Want string
	Got  string
	Met  bool
}

// Targets checks the targets for the session counts the report
// has (1, 100 and 500); the others are not checked.
func (rep Report) Targets() []Target {
	by := map[int]Result{}
	for _, r := range rep.Results {
		by[r.Sessions] = r
	}
	var out []Target
	if r, ok := by[1]; ok {
		out = append(out, Target{"1 session: step p50 against the floor", "ratio <= 1.5", fmt.Sprintf("%.2f", r.Ratio()), r.Ratio() <= 1.5})
	}
	r100, ok100 := by[100]
	if ok100 {
		out = append(out,
			Target{"100 sessions: CPU of mesh + nats-server + Redis", "<= 1.0 ms per iteration", fmt.Sprintf("%.2f ms", ms(r100.CPUPerIt())), r100.CPUPerIt() <= time.Millisecond},
			Target{"100 sessions: throughput", ">= 1200 iterations/s", fmt.Sprintf("%.0f", r100.ItsPerS()), r100.ItsPerS() >= 1200})
	}
	if r, ok := by[500]; ok {
		out = append(out,
			Target{"500 sessions: no stall", "longest gap <= 1 s", fmt.Sprintf("%.2f s", r.LongestGap.Seconds()), r.LongestGap <= time.Second},
			Target{"500 sessions: p99 against p50", "p99 <= 3 x p50", fmt.Sprintf("%.1f x", float64(r.StepP99)/float64(r.StepP50)), r.StepP99 <= 3*r.StepP50})
		if ok100 {
			share := r.ItsPerS() / r100.ItsPerS()
			out = append(out, Target{"500 sessions: throughput against 100", "at least 90% of 100 sessions'", fmt.Sprintf("%.0f%%", 100*share), share >= 0.9})
		}
	}
	if w := rep.Workspace; w != nil {
		out = append(out, Target{fmt.Sprintf("%d-file workspace: a step that ran one command", w.Files), "<= 5 ms more than on an empty one",
			fmt.Sprintf("%+.2f ms (a task's first step: %+.2f ms)", ms(w.Extra()), ms(w.ExtraFirst())), w.Extra() <= 5*time.Millisecond})
	}
	return out
}

func (t Target) verdict() string {
	if t.Met {
		return "met"
	}
	return "MISSED"
}

// WriteTargets prints the targets for people.
func (rep Report) WriteTargets(w io.Writer) error {
	ts := rep.Targets()
	if len(ts) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "targets (issue 13):"); err != nil {
		return err
	}
	for _, t := range ts {
		if _, err := fmt.Fprintf(w, "  %-6s %s: %s (want %s)\n", t.verdict(), t.Name, t.Got, t.Want); err != nil {
			return err
		}
	}
	return nil
}
