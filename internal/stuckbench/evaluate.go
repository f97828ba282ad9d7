package stuckbench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/console"
	"github.com/ralphmesh/ralph/services/stuckdetector"
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

// KindStats counts the healthy trajectories of one look-alike kind (or, as
// Report.KindTotal, all of them) and the signals raised on them.
type KindStats struct {
	// Kind is the trajectories' kind; NoKind for those without one.
	Kind string
	// Healthy is the number of healthy trajectories of the kind.
	Healthy int
	// FalseAlarms are those of them the detector raised a signal on.
	FalseAlarms int
	// FalsePositives are the signals raised on them.
	FalsePositives int
}

// NoKind is the Kind of the row for healthy trajectories whose label names
// no kind.
const NoKind = "(no kind)"

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
	// Kinds has a row for each look-alike kind of the healthy trajectories,
	// by name, with NoKind last; KindTotal sums them.
	Kinds     []KindStats
	KindTotal KindStats
	// Outcomes are per trajectory, in corpus order.
	Outcomes []Outcome
}

// Evaluate runs a fresh Detector with cfg and patterns (nil: the default
// patterns) over each trajectory of c, as `ralph stuck scan` would, and
// judges the signals against the labels (see Verdict and Outcome for how
// each signal counts). Like the Detector it takes zero fields of cfg as
// their defaults; a caller taking cfg from a user validates it first.
func Evaluate(c Corpus, cfg stuckdetector.Config, patterns []stuckdetector.Pattern) Report {
	if patterns == nil {
		patterns = stuckdetector.DefaultPatterns()
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

	kinds := map[string]*KindStats{}
	for _, t := range c.Trajectories {
		o := judge(t, cfg, patterns)
		if t.Label == LabelHealthy {
			r.Healthy++
			kind := t.Kind
			if kind == "" {
				kind = NoKind
			}
			if kinds[kind] == nil {
				kinds[kind] = &KindStats{Kind: kind}
			}
			k := kinds[kind]
			k.Healthy++
			k.FalsePositives += len(o.FalseSignals)
			if len(o.FalseSignals) > 0 {
				k.FalseAlarms++
			}
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
	r.KindTotal.Kind = "total"
	for _, k := range kinds {
		r.Kinds = append(r.Kinds, *k)
		r.KindTotal.Healthy += k.Healthy
		r.KindTotal.FalseAlarms += k.FalseAlarms
		r.KindTotal.FalsePositives += k.FalsePositives
	}
	slices.SortFunc(r.Kinds, func(a, b KindStats) int {
		if (a.Kind == NoKind) != (b.Kind == NoKind) {
			if a.Kind == NoKind {
				return 1
			}
			return -1
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return r
}

// judge runs one trajectory.
func judge(t Trajectory, cfg stuckdetector.Config, patterns []stuckdetector.Pattern) Outcome {
	o := Outcome{File: t.File, Label: t.Label, Expected: t.Pattern, Onset: t.Onset}
	d := stuckdetector.NewDetector(cfg, patterns)
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
// a table of the healthy trajectories by look-alike kind with the false
// positives raised on each, then every miss and every false positive with
// its file.
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
	if _, err := fmt.Fprintf(w, "\n%d stuck and %d healthy trajectories; latency is iterations from the loop's onset to its first detection.\n\n",
		r.Total.Stuck, r.Healthy); err != nil {
		return fmt.Errorf("write report: %w", err)
	}

	kinds := append(slices.Clone(r.Kinds), r.KindTotal)
	width = len("look-alike kind")
	for _, k := range kinds {
		width = max(width, len(k.Kind))
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\thealthy\tfalse alarms\tfalse+\t\n", width, "look-alike kind")
	for _, k := range kinds {
		fmt.Fprintf(tw, "%-*s\t%d\t%d\t%d\t\n", width, k.Kind, k.Healthy, k.FalseAlarms, k.FalsePositives)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}

	var b strings.Builder
	b.WriteString("\nfalse alarms are healthy trajectories with any signal; false+ counts the signals.\n")
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
			fmt.Fprintf(&b, "  %s: %s at %d%s: %s\n", o.File, s.Pattern, s.Iteration, where, clip(s.Diagnosis))
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

// maxDiagnosisRunes bounds a diagnosis quoted in the report, so that each
// false positive stays one line of a terminal.
const maxDiagnosisRunes = 100

// clip shortens s to maxDiagnosisRunes runes, marking the cut.
// clip shortens a diagnosis for the report and escapes what it quotes of
// the model, which could otherwise drive the terminal.
func clip(s string) string {
	if utf8.RuneCountInString(s) > maxDiagnosisRunes {
		s = string([]rune(s)[:maxDiagnosisRunes]) + "..."
	}
	return console.Escape(s)
}

func ratio(f float64, ok bool) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}
