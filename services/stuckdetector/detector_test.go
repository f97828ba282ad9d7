package stuckdetector

import (
	"math"
	"slices"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

// fixedPattern always fires with its confidence and records the window it
// was given.
type fixedPattern struct {
	name       string
	confidence float64
	strength   events.Strength
	seen       *[]events.IterationRecord
}

func (p fixedPattern) Name() string { return p.name }

func (p fixedPattern) Detect(window []events.IterationRecord, _ Config) *events.Signal {
	if p.seen != nil {
		*p.seen = slices.Clone(window)
	}
	if p.confidence == 0 {
		return nil
	}
	return &events.Signal{
		Iteration:  window[len(window)-1].Iteration,
		Pattern:    p.name,
		Confidence: p.confidence,
		Action:     events.ActionNudge,
		Diagnosis:  p.name,
		Strength:   p.strength,
	}
}

func TestDefaultConfig(t *testing.T) {
	want := Config{
		Window: 8, RepeatThreshold: 3, SimilarityThreshold: 0.9, NoProgressSpan: 5, AlternatingSteps: 4,
		MonologueTurns: 3, MonologueNovelty: 0.34, ChantRepeats: 3, ChantMinChars: 12, ChantCarryChars: 40,
		CompactionRepeats: 2,
	}
	if got := DefaultConfig(); got != want {
		t.Errorf("DefaultConfig() = %+v, want %+v", got, want)
	}
	if got := (Config{}).withDefaults(); got != want {
		t.Errorf("zero Config with defaults = %+v, want %+v", got, want)
	}
	if got := (Config{Window: 8}).withDefaults(); got.Window != 8 || got.RepeatThreshold != 3 {
		t.Errorf("Config{Window: 8} with defaults = %+v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"zero means defaults", Config{}, ""},
		{"defaults", DefaultConfig(), ""},
		{"window below repeat threshold", Config{Window: 2}, ""},
		{"negative window", Config{Window: -1}, "Window: must be at least 2 (one iteration holds no repeat), got -1"},
		{"window of one", Config{Window: 1}, "Window: must be at least 2 (one iteration holds no repeat), got 1"},
		{"repeat of one", Config{RepeatThreshold: 1}, "RepeatThreshold: must be at least 2 (one occurrence is no repeat), got 1"},
		{"similarity above 1", Config{SimilarityThreshold: 1.5}, "SimilarityThreshold: must be above 0 and at most 1, got 1.5"},
		{"similarity NaN", Config{SimilarityThreshold: math.NaN()}, "SimilarityThreshold: must be above 0 and at most 1, got NaN"},
		{"no-progress span of one", Config{NoProgressSpan: 1}, "NoProgressSpan: must be at least 2 (one quiet iteration is no stall), got 1"},
		{"no-progress span above window", Config{Window: 3, NoProgressSpan: 5}, ""},
		{"alternating steps of three", Config{AlternatingSteps: 3}, "AlternatingSteps: must be at least 4 (two full A/B cycles), got 3"},
		{"negative alternating steps", Config{AlternatingSteps: -4}, "AlternatingSteps: must be at least 4 (two full A/B cycles), got -4"},
		{"monologue of one turn", Config{MonologueTurns: 1}, "MonologueTurns: must be at least 2 (one turn is no monologue), got 1"},
		{"monologue novelty above 1", Config{MonologueNovelty: 1.2}, "MonologueNovelty: must be above 0 and at most 1, got 1.2"},
		{"negative monologue novelty", Config{MonologueNovelty: -0.1}, "MonologueNovelty: must be above 0 and at most 1, got -0.1"},
		{"chant repeats of one", Config{ChantRepeats: 1}, "ChantRepeats: must be at least 2 (one occurrence is no repeat), got 1"},
		{"chant chunk of three characters", Config{ChantMinChars: 3}, "ChantMinChars: must be at least 4 (shorter repeats are ordinary text), got 3"},
		{"negative chant carry", Config{ChantCarryChars: -40}, "ChantCarryChars: must be at least 4 (shorter passages are ordinary text), got -40"},
		{"one compaction", Config{CompactionRepeats: 1}, "CompactionRepeats: must be at least 2 (one compaction is no loop), got 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.wantErr {
				t.Errorf("Validate() = %q, want %q", got, tc.wantErr)
			}
		})
	}
}

func TestAnalyzePriority(t *testing.T) {
	same := func(it int) events.IterationRecord {
		return rec(it, "T1", text("Let me look at the loader again."), calls(readFile("a.go", "x")))
	}
	read := func(it int, say string) events.IterationRecord {
		return rec(it, "T1", text(say), calls(readFile("a.go", "x")))
	}
	tests := []struct {
		name     string
		window   []events.IterationRecord
		patterns []Pattern
		want     string // pattern of the signal; "" for none
	}{
		{
			name:   "all three fire: repetition is the strongest",
			window: []events.IterationRecord{same(1), same(2), same(3), same(4), same(5)},
			want:   "repetitive_output",
		},
		{
			name: "circular tools outrank no progress",
			window: []events.IterationRecord{
				read(1, "Reading the loader."), read(2, "Once more."), read(3, "Checking defaults."),
				read(4, "Looking at the parse."), read(5, "And the validation."),
			},
			want: "circular_tools",
		},
		{
			// Both fire on a failing call repeated byte for byte; the older
			// report is kept.
			name: "circular tools keep an identical failing repeat",
			window: []events.IterationRecord{
				rec(1, "T1", text("Testing."), calls(goTest("--- FAIL: TestLoad", 1))),
				rec(2, "T1", text("Again."), calls(goTest("--- FAIL: TestLoad", 1))),
				rec(3, "T1", text("Once more."), calls(goTest("--- FAIL: TestLoad", 1))),
			},
			want: "circular_tools",
		},
		{
			name: "a failure repeated under changing timings is an error loop",
			window: []events.IterationRecord{
				rec(1, "T1", text("Testing."), calls(goTest("--- FAIL: TestLoad\nFAIL\tacme\t0.012s", 1))),
				rec(2, "T1", text("Again."), calls(goTest("--- FAIL: TestLoad\nFAIL\tacme\t0.010s", 1))),
				rec(3, "T1", text("Once more."), calls(goTest("--- FAIL: TestLoad\nFAIL\tacme\t0.015s", 1))),
			},
			want: "action_error_loop",
		},
		{
			name: "identical claims are repetitive output before they are a monologue",
			window: []events.IterationRecord{
				rec(1, "T1", text("The task is complete."), claimedDone()),
				rec(2, "T1", text("The task is complete."), claimedDone()),
				rec(3, "T1", text("The task is complete."), claimedDone()),
			},
			want: "repetitive_output",
		},
		{
			name: "a compaction loop outranks the re-reads and the stall it contains",
			window: []events.IterationRecord{
				rec(1, "T1", calls(readFile("a.go", "A"))), rec(2, "T1", calls(readFile("b.go", "B"))),
				rec(3, "T1", wasCompacted(), calls(readFile("a.go", "A"))), rec(4, "T1", calls(readFile("b.go", "B"))),
				rec(5, "T1", wasCompacted(), calls(readFile("a.go", "A"))),
			},
			want: "compaction_loop",
		},
		{
			name: "a workspace flipping between two states outranks the stall",
			window: []events.IterationRecord{
				rec(1, "T1", hash("h1"), calls(readFile("a.go", "A"))),
				rec(2, "T1", hash("h2"), files("a.go"), calls(editFile("a.go", "x", "y"))),
				rec(3, "T1", hash("h1"), files("a.go"), calls(editFile("a.go", "y", "x"))),
				rec(4, "T1", hash("h2"), files("a.go"), calls(editFile("a.go", "x", "y"))),
				rec(5, "T1", hash("h1"), files("a.go"), calls(editFile("a.go", "y", "x"))),
			},
			want: "alternating",
		},
		{
			name:     "higher confidence later in the list wins",
			window:   []events.IterationRecord{rec(1, "T1")},
			patterns: []Pattern{fixedPattern{name: "low", confidence: 0.5}, fixedPattern{name: "high", confidence: 0.7}},
			want:     "high",
		},
		{
			name:   "strong evidence wins over more confidence",
			window: []events.IterationRecord{rec(1, "T1")},
			patterns: []Pattern{
				fixedPattern{name: "sure", confidence: 0.9, strength: events.StrengthWeak},
				fixedPattern{name: "seen often", confidence: 0.6, strength: events.StrengthStrong},
			},
			want: "seen often",
		},
		{
			// Read a.go four times with the same words only in the last
			// three: the reads are strong evidence, the words weak.
			name: "four identical reads outrank three identical responses",
			window: []events.IterationRecord{
				read(1, "Reading the loader."), same(2), same(3), same(4),
			},
			want: "circular_tools",
		},
		{
			name:     "tie goes to the earlier pattern",
			window:   []events.IterationRecord{rec(1, "T1")},
			patterns: []Pattern{fixedPattern{name: "first", confidence: 0.5}, fixedPattern{name: "second", confidence: 0.5}},
			want:     "first",
		},
		{
			name:     "tie goes to the earlier pattern, swapped",
			window:   []events.IterationRecord{rec(1, "T1")},
			patterns: []Pattern{fixedPattern{name: "second", confidence: 0.5}, fixedPattern{name: "first", confidence: 0.5}},
			want:     "second",
		},
		{
			name:     "silent patterns are skipped",
			window:   []events.IterationRecord{rec(1, "T1")},
			patterns: []Pattern{fixedPattern{name: "silent"}, fixedPattern{name: "loud", confidence: 0.1}},
			want:     "loud",
		},
		{
			name:     "no patterns, no signal",
			window:   []events.IterationRecord{same(1), same(2), same(3)},
			patterns: []Pattern{},
		},
		{
			name: "empty window",
		},
		{
			name:   "healthy window",
			window: []events.IterationRecord{rec(1, "T1", files("a.go")), rec(2, "T1", files("b.go"))},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Analyze(tc.window, Config{}, tc.patterns)
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("Analyze = %+v, want nil", got)
			case tc.want != "" && got == nil:
				t.Errorf("Analyze = nil, want %s", tc.want)
			case tc.want != "" && got.Pattern != tc.want:
				t.Errorf("Analyze = %s (%v), want %s", got.Pattern, got.Confidence, tc.want)
			}
		})
	}
}

func TestAnalyzeWindowSelection(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		window []events.IterationRecord
		want   []int // iterations the pattern sees
	}{
		{
			name:   "only the newest task",
			window: []events.IterationRecord{rec(1, "T1"), rec(2, "T1"), rec(3, "T2"), rec(4, "T2")},
			want:   []int{3, 4},
		},
		{
			name:   "only the trailing run of the newest task",
			window: []events.IterationRecord{rec(1, "T1"), rec(2, "T2"), rec(3, "T1")},
			want:   []int{3},
		},
		{
			name:   "capped to the configured window",
			cfg:    Config{Window: 3},
			window: []events.IterationRecord{rec(1, "T1"), rec(2, "T1"), rec(3, "T1"), rec(4, "T1"), rec(5, "T1")},
			want:   []int{3, 4, 5},
		},
		{
			name: "zero window means the default of eight",
			window: []events.IterationRecord{
				rec(1, ""), rec(2, ""), rec(3, ""), rec(4, ""), rec(5, ""), rec(6, ""), rec(7, ""),
				rec(8, ""), rec(9, ""), rec(10, ""),
			},
			want: []int{3, 4, 5, 6, 7, 8, 9, 10},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var seen []events.IterationRecord
			Analyze(tc.window, tc.cfg, []Pattern{fixedPattern{name: "spy", seen: &seen}})
			if got := iterationsOf(seen); !slices.Equal(got, tc.want) {
				t.Errorf("pattern saw iterations %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAnalyzeNilPatternsMeansDefaults(t *testing.T) {
	window := []events.IterationRecord{rec(1, "T1"), rec(2, "T1"), rec(3, "T1"), rec(4, "T1"), rec(5, "T1")}
	s := Analyze(window, DefaultConfig(), nil)
	if s == nil || s.Pattern != "no_progress" || s.Action != events.ActionNudge || s.Confidence != 0.8 || s.Strength != events.StrengthWeak {
		t.Fatalf("Analyze(nil patterns) = %+v, want no_progress, weak", s)
	}
	s = Analyze(append(window, rec(6, "T1")), DefaultConfig(), nil)
	if s == nil || s.Pattern != "no_progress" || s.Action != events.ActionDecompose || s.Strength != events.StrengthStrong {
		t.Fatalf("Analyze(nil patterns) one iteration later = %+v, want no_progress, strong", s)
	}
}

func TestDetectorClearsAfterStrongSignal(t *testing.T) {
	d := NewDetector(DefaultConfig(), nil)
	var fired []int
	var strengths []events.Strength
	for it := 1; it <= 7; it++ {
		r := rec(it, "T1", calls(readFile("a.go", "x")))
		s := d.Observe(r)
		if s == nil {
			continue
		}
		checkSignal(t, s, r, "circular_tools")
		fired = append(fired, s.Iteration)
		strengths = append(strengths, s.Strength)
		if want := s.Strength == events.StrengthWeak; (len(d.window) > 0) != want {
			t.Errorf("after a %s signal at %d the window holds %d records", s.Strength, it, len(d.window))
		}
	}
	// Three reads are weak evidence: a nudge, and the window kept. The
	// fourth read makes it strong: the builder prunes and the window is
	// cleared, so 5 and 6 alone do not fire on the evidence of 1-4; 5-7 is
	// fresh evidence, weak again.
	if want := []int{3, 4, 7}; !slices.Equal(fired, want) {
		t.Errorf("fired at %v, want %v", fired, want)
	}
	if want := []events.Strength{events.StrengthWeak, events.StrengthStrong, events.StrengthWeak}; !slices.Equal(strengths, want) {
		t.Errorf("strengths %v, want %v", strengths, want)
	}
}

func TestClearsWindow(t *testing.T) {
	tests := []struct {
		s    *events.Signal
		want bool
	}{
		{nil, false},
		{&events.Signal{Strength: events.StrengthWeak, Action: events.ActionNudge}, false},
		{&events.Signal{Strength: events.StrengthStrong, Action: events.ActionPrune}, true},
		{&events.Signal{Strength: events.StrengthStrong, Action: events.ActionNudge}, true},
		// A pattern that does not grade clears, as every signal used to.
		{&events.Signal{Action: events.ActionNudge}, true},
	}
	for _, tc := range tests {
		if got := ClearsWindow(tc.s); got != tc.want {
			t.Errorf("ClearsWindow(%+v) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestDetectorBoundsWindow(t *testing.T) {
	d := NewDetector(Config{Window: 4}, nil)
	for it := 1; it <= 50; it++ {
		if s := d.Observe(rec(it, "T1", files("a.go"), calls(editFile("a.go", "x", "y")))); s != nil {
			t.Fatalf("productive work fired: %+v", s)
		}
		if len(d.window) > 4 {
			t.Fatalf("window holds %d records, want at most 4", len(d.window))
		}
	}
	if got := iterationsOf(d.window); !slices.Equal(got, []int{47, 48, 49, 50}) {
		t.Errorf("window holds %v, want the last four", got)
	}
}

func TestDetectorDropsPreviousTask(t *testing.T) {
	d := NewDetector(DefaultConfig(), nil)
	d.Observe(rec(1, "T1"))
	d.Observe(rec(2, "T1"))
	d.Observe(rec(3, "T2"))
	if got := iterationsOf(d.window); !slices.Equal(got, []int{3}) {
		t.Errorf("window holds %v after a task switch, want [3]", got)
	}
}

// TestPatternsAlone checks the patterns when called directly with a raw
// window and a zero Config, as a caller composing its own list might.
func TestPatternsAlone(t *testing.T) {
	read := func(it int) events.IterationRecord { return rec(it, "T1", calls(readFile("a.go", "x"))) }
	window := []events.IterationRecord{read(1), read(2), read(3), read(4), read(5)}
	for _, p := range DefaultPatterns() {
		if s := p.Detect(nil, Config{}); s != nil {
			t.Errorf("%s fired on an empty window: %+v", p.Name(), s)
		}
	}
	if s := (CircularTools{}).Detect(window, Config{}); s == nil || s.Iteration != 5 {
		t.Errorf("circular_tools = %+v, want a signal at 5", s)
	}
	if s := (NoProgress{}).Detect(window, Config{}); s == nil || s.Iteration != 5 {
		t.Errorf("no_progress = %+v, want a signal at 5", s)
	}
}

func TestPatternNames(t *testing.T) {
	var names []string
	for _, p := range DefaultPatterns() {
		names = append(names, p.Name())
	}
	want := []string{
		"repetitive_output", "chanting", "compaction_loop", "monologue", "alternating",
		"circular_tools", "action_error_loop", "no_progress",
	}
	if !slices.Equal(names, want) {
		t.Errorf("DefaultPatterns names %v, want %v", names, want)
	}
}
