package stuckbench

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/stuckdetector"
)

// TestShippedCorpus is the corpus's contract with the detector: the default
// configuration raises no signal on a healthy trajectory, catches at least
// 95% of the stuck ones as the expected pattern, and catches each within
// three iterations of the loop's onset.
func TestShippedCorpus(t *testing.T) {
	c, err := ShippedCorpus()
	if err != nil {
		t.Fatal(err)
	}
	stuck := map[string]int{}
	resembles := map[string]int{}
	kinds := map[string]int{}
	healthy := 0
	for _, tr := range c.Trajectories {
		if tr.Label == LabelStuck {
			stuck[tr.Pattern]++
		} else {
			healthy++
			resembles[tr.Resembles]++
			kinds[tr.Kind]++
			if tr.Kind == "" {
				t.Errorf("%s: healthy trajectory without a look-alike kind", tr.File)
			}
		}
	}
	// The look-alikes issue 11 names, each with its own labelled cases.
	for _, k := range []string{"distinct_reads", "shell_mix_with_repeats", "list_shared_prefix", "table_dividers", "code_blocks", "far_repeats", "polling_with_progress"} {
		if kinds[k] == 0 {
			t.Errorf("no healthy trajectory of kind %s", k)
		}
	}
	if n := len(c.Trajectories) - healthy; n < 30 || healthy < 30 {
		t.Errorf("corpus has %d stuck and %d healthy trajectories, want at least 30 of each", n, healthy)
	}
	for _, p := range stuckdetector.DefaultPatterns() {
		if stuck[p.Name()] < 3 || resembles[p.Name()] < 3 {
			t.Errorf("pattern %s has %d stuck trajectories and %d healthy look-alikes, want at least 3 of each",
				p.Name(), stuck[p.Name()], resembles[p.Name()])
		}
	}

	r := Evaluate(c, stuckdetector.DefaultConfig(), nil)
	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("evaluation of the shipped corpus:\n%s", out.String())

	if r.Total.FalsePositives != 0 {
		t.Errorf("%d false positives on healthy iterations, want 0", r.Total.FalsePositives)
	}
	if r.KindTotal.Healthy != healthy || len(r.Kinds) != len(kinds) {
		t.Errorf("kind rows %+v (total %+v), want %d kinds over %d healthy trajectories", r.Kinds, r.KindTotal, len(kinds), healthy)
	}
	if recall, _ := r.Total.Recall(); recall < 0.95 {
		t.Errorf("recall %.2f, want >= 0.95", recall)
	}
	for _, o := range r.Outcomes {
		if o.Verdict == VerdictDetected && o.Latency > 3 {
			t.Errorf("%s: detected %d iterations after the onset at %d, want at most 3", o.File, o.Latency, o.Onset)
		}
	}
}

// TestCorpusScansLikeStuckScan checks that every corpus file is valid
// `ralph stuck scan` input and that Scan reports what Evaluate saw.
func TestCorpusScansLikeStuckScan(t *testing.T) {
	c, err := ShippedCorpus()
	if err != nil {
		t.Fatal(err)
	}
	r := Evaluate(c, stuckdetector.DefaultConfig(), nil)
	fsys := CorpusFS()
	for i, tr := range c.Trajectories {
		t.Run(tr.File, func(t *testing.T) {
			raw, err := fsys.(interface {
				ReadFile(string) ([]byte, error)
			}).ReadFile(tr.File)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := Scan(bytes.NewReader(raw), &out, stuckdetector.DefaultConfig(), nil); err != nil {
				t.Fatalf("stuck scan: %v", err)
			}
			var scanned []int
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if line == "" {
					continue
				}
				var s scanSignal
				if err := json.Unmarshal([]byte(line), &s); err != nil {
					t.Fatalf("scan output %q: %v", line, err)
				}
				scanned = append(scanned, s.Iteration)
			}
			o := r.Outcomes[i]
			var judged []int
			for _, s := range o.FalseSignals {
				judged = append(judged, s.Iteration)
			}
			if o.Detection != nil {
				judged = append(judged, o.Detection.Iteration)
			}
			// Evaluate stops at the detection; Scan goes on.
			if len(scanned) < len(judged) || !slices.Equal(scanned[:len(judged)], judged) {
				t.Errorf("scan signalled at %v, evaluate at %v", scanned, judged)
			}
		})
	}
}

// scripted fires, for each trajectory (records carry the file name as
// their task), the patterns its script names at the given iterations.
type scripted map[string]map[int]string

func (scripted) Name() string { return "scripted" }

func (s scripted) Detect(window []events.IterationRecord, _ stuckdetector.Config) *events.Signal {
	newest := window[len(window)-1]
	name, ok := s[newest.TaskID][newest.Iteration]
	if !ok {
		return nil
	}
	return &events.Signal{Iteration: newest.Iteration, Pattern: name, Confidence: 0.5, Action: events.ActionNudge, Diagnosis: name + " here"}
}

func trajectoryOf(file string, label Label, pattern string, onset int) Trajectory {
	t := Trajectory{File: file, Label: label, Pattern: pattern, Onset: onset, Description: file}
	if label == LabelHealthy {
		t.Kind = "polling"
	}
	for i := 1; i <= 6; i++ {
		t.Records = append(t.Records, events.IterationRecord{Iteration: i, TaskID: file})
	}
	return t
}

func TestEvaluateCounting(t *testing.T) {
	c := Corpus{Trajectories: []Trajectory{
		trajectoryOf("hit.jsonl", LabelStuck, "alpha", 3),
		trajectoryOf("early.jsonl", LabelStuck, "alpha", 4),
		trajectoryOf("wrong.jsonl", LabelStuck, "alpha", 2),
		trajectoryOf("missed.jsonl", LabelStuck, "gamma", 5),
		trajectoryOf("noisy.jsonl", LabelHealthy, "", 0),
		trajectoryOf("quiet.jsonl", LabelHealthy, "", 0),
		trajectoryOf("after.jsonl", LabelStuck, "beta", 1),
		trajectoryOf("reads.jsonl", LabelHealthy, "", 0),
		trajectoryOf("unkinded.jsonl", LabelHealthy, "", 0),
	}}
	c.Trajectories[7].Kind = "distinct_reads"
	c.Trajectories[8].Kind = ""
	script := scripted{
		"hit.jsonl":    {5: "alpha"},             // detected, latency 2
		"early.jsonl":  {2: "alpha", 4: "alpha"}, // a false alarm before the onset, then detected at it
		"wrong.jsonl":  {3: "beta"},              // caught as the wrong pattern
		"missed.jsonl": {4: "alpha"},             // a false alarm before the onset, then nothing
		"noisy.jsonl":  {2: "beta", 5: "beta"},   // two false positives
		"after.jsonl":  {1: "beta", 3: "alpha"},  // detected at the onset; what follows is ignored
		"reads.jsonl":  {6: "alpha"},             // a false positive on another kind
	}
	r := Evaluate(c, stuckdetector.Config{}, []stuckdetector.Pattern{script})

	wantVerdicts := []Verdict{VerdictDetected, VerdictDetected, VerdictWrongPattern, VerdictMissed, VerdictFalseAlarm, VerdictQuiet, VerdictDetected,
		VerdictFalseAlarm, VerdictQuiet}
	wantLatency := []int{2, 0, 1, 0, 0, 0, 0, 0, 0}
	wantFalse := []int{0, 1, 0, 1, 2, 0, 0, 1, 0}
	for i, o := range r.Outcomes {
		if o.Verdict != wantVerdicts[i] || o.Latency != wantLatency[i] || len(o.FalseSignals) != wantFalse[i] {
			t.Errorf("%s: verdict %s, latency %d, %d false signals; want %s, %d, %d",
				o.File, o.Verdict, o.Latency, len(o.FalseSignals), wantVerdicts[i], wantLatency[i], wantFalse[i])
		}
	}

	rows := map[string]PatternStats{}
	var names []string
	for _, s := range r.Patterns {
		rows[s.Pattern] = s
		names = append(names, s.Pattern)
	}
	// The evaluated pattern first, then the reported and expected ones that
	// were not in the list, by name.
	if want := []string{"scripted", "alpha", "beta", "gamma"}; !slices.Equal(names, want) {
		t.Fatalf("rows %v, want %v", names, want)
	}
	check := func(name string, stuck, detected, missed, wrong, fp int) {
		t.Helper()
		s := rows[name]
		if s.Stuck != stuck || s.Detected != detected || s.Missed != missed || s.Wrong != wrong || s.FalsePositives != fp {
			t.Errorf("%s: %+v, want stuck %d detected %d missed %d wrong %d false+ %d", name, s, stuck, detected, missed, wrong, fp)
		}
	}
	check("alpha", 3, 2, 1, 0, 3)
	check("beta", 1, 1, 0, 1, 2)
	check("gamma", 1, 0, 1, 0, 0)
	check("scripted", 0, 0, 0, 0, 0)
	tot := r.Total
	if tot.Stuck != 5 || tot.Detected != 3 || tot.Missed != 2 || tot.Wrong != 1 || tot.FalsePositives != 5 || r.Healthy != 4 {
		t.Errorf("total %+v (healthy %d)", tot, r.Healthy)
	}
	if p, ok := tot.Precision(); !ok || p != 3.0/9 {
		t.Errorf("precision %v, want 3/9", p)
	}
	// The healthy trajectories by kind, by name with the unkinded last:
	// the noisy one of two "polling" files, the one "distinct_reads" file.
	wantKinds := []KindStats{
		{Kind: "distinct_reads", Healthy: 1, FalseAlarms: 1, FalsePositives: 1},
		{Kind: "polling", Healthy: 2, FalseAlarms: 1, FalsePositives: 2},
		{Kind: NoKind, Healthy: 1},
	}
	if !slices.Equal(r.Kinds, wantKinds) {
		t.Errorf("kinds %+v, want %+v", r.Kinds, wantKinds)
	}
	if want := (KindStats{Kind: "total", Healthy: 4, FalseAlarms: 2, FalsePositives: 3}); r.KindTotal != want {
		t.Errorf("kind total %+v, want %+v", r.KindTotal, want)
	}
	if rc, ok := tot.Recall(); !ok || rc != 3.0/5 {
		t.Errorf("recall %v, want 3/5", rc)
	}
	if l, ok := rows["alpha"].MeanLatency(); !ok || l != 1 || rows["alpha"].MaxLatency != 2 {
		t.Errorf("alpha latency mean %v max %d, want 1 and 2", l, rows["alpha"].MaxLatency)
	}
	if _, ok := rows["gamma"].MeanLatency(); ok {
		t.Error("gamma has a mean latency without detections")
	}
	if _, ok := rows["scripted"].Precision(); ok {
		t.Error("scripted never fired under its own name but has a precision")
	}

	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"wrong.jsonl: expected alpha from iteration 2, got beta at 3",
		"missed.jsonl: expected gamma from iteration 5, no signal at or after it",
		"noisy.jsonl: beta at 2: beta here",
		"noisy.jsonl: beta at 5: beta here",
		"early.jsonl: alpha at 2, before the onset at 4: alpha here",
		"reads.jsonl: alpha at 6: alpha here",
		"5 stuck and 4 healthy trajectories",
		"look-alike kind  healthy  false alarms  false+",
		"distinct_reads         1             1       1",
		"polling                2             1       2",
		"(no kind)              1             0       0",
		"total                  4             2       3",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "after.jsonl") {
		t.Errorf("a signal after the detection was reported:\n%s", out.String())
	}
}

func TestLoadCorpusErrors(t *testing.T) {
	good := `{"iteration":1,"task_id":"T1"}` + "\n" + `{"iteration":2,"task_id":"T1"}` + "\n"
	labels := func(entries string) string { return "{\n  \"trajectories\": [\n" + entries + "\n  ]\n}\n" }
	entry := `    {"file": "a.jsonl", "label": "stuck", "pattern": "circular_tools", "onset": 2, "description": "d"}`
	tests := []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"no manifest", fstest.MapFS{"a.jsonl": {Data: []byte(good)}}, "load corpus: open labels.json: file does not exist"},
		{"manifest not JSON", fstest.MapFS{"labels.json": {Data: []byte("{\n  \"trajectories\": [\n    {\"file\": }\n")}},
			"load corpus: labels.json: line 3: invalid character '}' looking for beginning of value"},
		{"unknown field", fstest.MapFS{"labels.json": {Data: []byte(labels(`    {"file": "a.jsonl", "label": "stuck", "onest": 2}`))}},
			`load corpus: labels.json: line 3: json: unknown field "onest"`},
		{"wrong type", fstest.MapFS{"labels.json": {Data: []byte(labels(`    {"file": "a.jsonl", "label": "stuck", "onset": "2"}`))}},
			"load corpus: labels.json: line 3: field onset: want integer, got string"},
		{"unknown label", fstest.MapFS{"labels.json": {Data: []byte(labels(entry + ",\n" + `    {"file": "b.jsonl", "label": "fine", "description": "d"}`))}, "a.jsonl": {Data: []byte(good)}},
			`load corpus: labels.json: line 4: trajectories[1]: field label: must be "stuck" or "healthy", got "fine" (b.jsonl)`},
		{"stuck without onset", fstest.MapFS{"labels.json": {Data: []byte(labels(`    {"file": "a.jsonl", "label": "stuck", "pattern": "circular_tools", "description": "d"}`))}},
			"load corpus: labels.json: line 3: trajectories[0]: field onset: must be >= 1 for a stuck trajectory, got 0 (a.jsonl)"},
		{"onset not in file", fstest.MapFS{"labels.json": {Data: []byte(labels(strings.Replace(entry, `"onset": 2`, `"onset": 9`, 1)))}, "a.jsonl": {Data: []byte(good)}},
			"load corpus: labels.json: line 3: trajectories[0]: field onset: a.jsonl has no iteration 9"},
		{"missing file", fstest.MapFS{"labels.json": {Data: []byte(labels(entry))}},
			"load corpus: labels.json: line 3: trajectories[0]: open a.jsonl: file does not exist"},
		{"bad record", fstest.MapFS{"labels.json": {Data: []byte(labels(entry))}, "a.jsonl": {Data: []byte(good + `{"iteration":"3"}` + "\n")}},
			"load corpus: a.jsonl: line 3: field iteration: want integer, got string"},
		{"listed twice", fstest.MapFS{"labels.json": {Data: []byte(labels(entry + ",\n" + entry))}, "a.jsonl": {Data: []byte(good)}},
			"load corpus: labels.json: line 4: trajectories[1]: field file: a.jsonl is listed twice"},
		{"not listed", fstest.MapFS{"labels.json": {Data: []byte(labels(entry))}, "a.jsonl": {Data: []byte(good)}, "b.jsonl": {Data: []byte(good)}},
			"load corpus: b.jsonl: not listed in labels.json"},
		{"healthy with a pattern", fstest.MapFS{"labels.json": {Data: []byte(labels(`    {"file": "a.jsonl", "label": "healthy", "pattern": "x", "description": "d"}`))}},
			"load corpus: labels.json: line 3: trajectories[0]: fields pattern and onset: only for stuck trajectories (a.jsonl)"},
		{"stuck with a kind", fstest.MapFS{"labels.json": {Data: []byte(labels(strings.Replace(entry, `"onset": 2`, `"onset": 2, "kind": "distinct_reads"`, 1)))}},
			"load corpus: labels.json: line 3: trajectories[0]: fields resembles and kind: only for healthy trajectories (a.jsonl)"},
		{"kind not snake case", fstest.MapFS{"labels.json": {Data: []byte(labels(`    {"file": "a.jsonl", "label": "healthy", "kind": "Distinct reads", "description": "d"}`))}},
			`load corpus: labels.json: line 3: trajectories[0]: field kind: "Distinct reads" is not a lower_snake_case name (a.jsonl)`},
		{"file in a directory", fstest.MapFS{"labels.json": {Data: []byte(labels(`    {"file": "sub/a.jsonl", "label": "healthy", "description": "d"}`))}},
			`load corpus: labels.json: line 3: trajectories[0]: field file: "sub/a.jsonl" must be a .jsonl file at the corpus root`},
		{"empty file", fstest.MapFS{"labels.json": {Data: []byte(labels(`    {"file": "a.jsonl", "label": "healthy", "description": "d"}`))}, "a.jsonl": {Data: []byte("\n")}},
			"load corpus: a.jsonl: no iteration records"},
		{"no trajectories field", fstest.MapFS{"labels.json": {Data: []byte("{}")}}, "load corpus: labels.json: field trajectories: required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCorpus(tc.files)
			if err == nil || err.Error() != tc.want {
				t.Errorf("LoadCorpus error\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}

	c, err := LoadCorpus(fstest.MapFS{"labels.json": {Data: []byte(labels(entry))}, "a.jsonl": {Data: []byte(good)}})
	if err != nil || len(c.Trajectories) != 1 || len(c.Trajectories[0].Records) != 2 || c.Trajectories[0].Onset != 2 {
		t.Errorf("LoadCorpus = %+v, %v", c, err)
	}
}
