package stuckdetector

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Verdict is what became of one trajectory in an evaluation.
type Verdict string

// The verdicts. A stuck trajectory is judged by the first signal at or after
// its onset, because the builder intervenes on that signal and what the
// trajectory does afterwards is no longer what would have happened.
const (
	// VerdictDetected: stuck, and the first signal at or after the onset
	// is the expected pattern (a true positive).
	VerdictDetected Verdict = "detected"
	// VerdictWrongPattern: stuck, and the first signal at or after the
	// onset is another pattern. The loop was caught, but with the wrong
	// diagnosis and perhaps the wrong action: a miss for the expected
	// pattern and a wrong report for the one that fired.
	VerdictWrongPattern Verdict = "wrong_pattern"
	// VerdictMissed: stuck, and no signal at or after the onset.
	VerdictMissed Verdict = "missed"
	// VerdictFalseAlarm: healthy, and the detector raised a signal.
	VerdictFalseAlarm Verdict = "false_alarm"
	// VerdictQuiet: healthy, and no signal.
	VerdictQuiet Verdict = "quiet"
)

// Outcome is one trajectory's result.
type Outcome struct {
	File     string
	Label    Label
	Expected string // pattern, for a stuck trajectory
	Onset    int    // for a stuck trajectory
	Verdict  Verdict
	// Detection is the first signal at or after the onset of a stuck
	// trajectory (detected or wrong pattern); nil otherwise.
	Detection *events.Signal
	// Latency is Detection's iteration minus the onset.
	Latency int
	// FalseSignals are the signals raised on healthy iterations: every
	// signal of a healthy trajectory, and those before the onset of a
	// stuck one (the detector fired on its healthy prefix, and the builder
	// would have intervened in a healthy session).
	FalseSignals []events.Signal
}

// PatternStats counts one pattern's results (or, as Report.Total, all of
// them). Every signal that counts is exactly one of Detected, Wrong or
// FalsePositives; every stuck trajectory is exactly one of Detected or
// Missed.
type PatternStats struct {
	Pattern string
	// Stuck is the number of stuck trajectories that expect the pattern.
	Stuck int
	// Detected are the true positives.
	Detected int
	// Missed are the stuck trajectories expecting the pattern that were not
	// detected as it (no signal, or another pattern's).
	Missed int
	// Wrong are the detections reported as this pattern on trajectories
	// that expect another.
	Wrong int
	// FalsePositives are this pattern's signals on healthy iterations.
	FalsePositives int
	// LatencySum and MaxLatency are over the detections, in iterations
	// from onset to detection.
	LatencySum int
	MaxLatency int
}

// Precision is Detected / (Detected + Wrong + FalsePositives); ok is false
// when the pattern never fired.
func (s PatternStats) Precision() (p float64, ok bool) {
	fired := s.Detected + s.Wrong + s.FalsePositives
	if fired == 0 {
		return 0, false
	}
	return float64(s.Detected) / float64(fired), true
}

// Recall is Detected / Stuck; ok is false when no trajectory expects the
// pattern.
func (s PatternStats) Recall() (r float64, ok bool) {
	if s.Stuck == 0 {
		return 0, false
	}
	return float64(s.Detected) / float64(s.Stuck), true
}

// MeanLatency is the mean number of iterations from onset to detection;
// ok is false when there were no detections.
func (s PatternStats) MeanLatency() (l float64, ok bool) {
	if s.Detected == 0 {
		return 0, false
	}
	return float64(s.LatencySum) / float64(s.Detected), true
}

func (s *PatternStats) add(o PatternStats) {
	s.Stuck += o.Stuck
	s.Detected += o.Detected
	s.Missed += o.Missed
	s.Wrong += o.Wrong
	s.FalsePositives += o.FalsePositives
	s.LatencySum += o.LatencySum
	s.MaxLatency = max(s.MaxLatency, o.MaxLatency)
}

// Report is an evaluation's result.
type Report struct {
	// Patterns has a row for each pattern evaluated, in list order, then
	// one for each expected pattern that was not in the list (so that its
	// misses show), by name.
	Patterns []PatternStats
	// Total sums the rows.
	Total PatternStats
	// Healthy counts the healthy trajectories.
	Healthy int
	// Outcomes are per trajectory, in corpus order.
	Outcomes []Outcome
}

// Evaluate runs a fresh Detector with cfg and patterns (nil: the default
// patterns) over each trajectory of c, as `ralph stuck scan` would, and
// judges the signals against the labels (see Verdict and Outcome for how
// each signal counts). Like the Detector it takes zero fields of cfg as
// their defaults; a caller taking cfg from a user validates it first.
func Evaluate(c Corpus, cfg Config, patterns []Pattern) Report {
	if patterns == nil {
		patterns = DefaultPatterns()
	}
	var r Report
	rows := map[string]*PatternStats{}
	var order []string
	row := func(name string) *PatternStats {
		if rows[name] == nil {
			rows[name] = &PatternStats{Pattern: name}
			order = append(order, name)
		}
		return rows[name]
	}
	for _, p := range patterns {
		row(p.Name())
	}
	listed := len(order)

	for _, t := range c.Trajectories {
		o := judge(t, cfg, patterns)
		if t.Label == LabelHealthy {
			r.Healthy++
		} else {
			row(t.Pattern).Stuck++
		}
		for _, s := range o.FalseSignals {
			row(s.Pattern).FalsePositives++
		}
		switch o.Verdict {
		case VerdictDetected:
			st := row(t.Pattern)
			st.Detected++
			st.LatencySum += o.Latency
			st.MaxLatency = max(st.MaxLatency, o.Latency)
		case VerdictWrongPattern:
			row(t.Pattern).Missed++
			row(o.Detection.Pattern).Wrong++
		case VerdictMissed:
			row(t.Pattern).Missed++
		}
		r.Outcomes = append(r.Outcomes, o)
	}

	slices.Sort(order[listed:])
	r.Total.Pattern = "total"
	for _, name := range order {
		r.Patterns = append(r.Patterns, *rows[name])
		r.Total.add(*rows[name])
	}
	return r
}

// judge runs one trajectory.
func judge(t Trajectory, cfg Config, patterns []Pattern) Outcome {
	o := Outcome{File: t.File, Label: t.Label, Expected: t.Pattern, Onset: t.Onset}
	d := NewDetector(cfg, patterns)
	for _, rec := range t.Records {
		s := d.Observe(rec)
		if s == nil {
			continue
		}
		if t.Label == LabelHealthy || s.Iteration < t.Onset {
			o.FalseSignals = append(o.FalseSignals, *s)
			continue
		}
		o.Detection = s
		o.Latency = s.Iteration - t.Onset
		break
	}
	switch {
	case t.Label == LabelHealthy && len(o.FalseSignals) > 0:
		o.Verdict = VerdictFalseAlarm
	case t.Label == LabelHealthy:
		o.Verdict = VerdictQuiet
	case o.Detection == nil:
		o.Verdict = VerdictMissed
	case o.Detection.Pattern == t.Pattern:
		o.Verdict = VerdictDetected
	default:
		o.Verdict = VerdictWrongPattern
	}
	return o
}

// Write prints the report: a table with a row per pattern and a total row,
// then every miss and every false positive with its file.
func (r Report) Write(w io.Writer) error {
	rows := append(slices.Clone(r.Patterns), r.Total)
	// Numbers read best right-aligned, names left-aligned; tabwriter aligns
	// every column one way, so the names are padded to a common width.
	width := len("pattern")
	for _, s := range rows {
		width = max(width, len(s.Pattern))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tstuck\tdetected\tmissed\twrong\tfalse+\tprecision\trecall\tmean latency\tmax latency\t\n", width, "pattern")
	for _, s := range rows {
		prec, okP := s.Precision()
		rec, okR := s.Recall()
		lat, okL := s.MeanLatency()
		maxLat := "-"
		if okL {
			maxLat = strconv.Itoa(s.MaxLatency)
		}
		fmt.Fprintf(tw, "%-*s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n", width, s.Pattern, s.Stuck, s.Detected, s.Missed, s.Wrong,
			s.FalsePositives, ratio(prec, okP), ratio(rec, okR), ratio(lat, okL), maxLat)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "\n%d stuck and %d healthy trajectories; latency is iterations from the loop's onset to its first detection.\n",
		r.Total.Stuck, r.Healthy)
	b.WriteString("\nmisses:\n")
	n := 0
	for _, o := range r.Outcomes {
		if o.Verdict != VerdictMissed && o.Verdict != VerdictWrongPattern {
			continue
		}
		n++
		got := "no signal at or after it"
		if o.Detection != nil {
			got = fmt.Sprintf("got %s at %d", o.Detection.Pattern, o.Detection.Iteration)
		}
		fmt.Fprintf(&b, "  %s: expected %s from iteration %d, %s\n", o.File, o.Expected, o.Onset, got)
	}
	if n == 0 {
		b.WriteString("  none\n")
	}
	b.WriteString("\nfalse positives:\n")
	n = 0
	for _, o := range r.Outcomes {
		for _, s := range o.FalseSignals {
			n++
			where := ""
			if o.Label == LabelStuck {
				where = fmt.Sprintf(", before the onset at %d", o.Onset)
			}
			fmt.Fprintf(&b, "  %s: %s at %d%s: %s\n", o.File, s.Pattern, s.Iteration, where, truncate(s.Diagnosis))
		}
	}
	if n == 0 {
		b.WriteString("  none\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

func ratio(f float64, ok bool) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}
