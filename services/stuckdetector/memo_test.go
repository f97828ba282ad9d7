package stuckdetector

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

// corpusRecords is every record of the labelled corpus and the scan test
// data of internal/stuckbench, one slice per trajectory: real shapes of
// outputs, errors and args to hold the shortcuts of the analysis against.
func corpusRecords(t *testing.T) map[string][]events.IterationRecord {
	t.Helper()
	var paths []string
	for _, dir := range []string{"corpus", "testdata"} {
		m, err := filepath.Glob(filepath.Join("..", "..", "internal", "stuckbench", dir, "*.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, m...)
	}
	if len(paths) < 50 {
		t.Fatalf("found %d trajectories; the corpus has moved?", len(paths))
	}
	out := map[string][]events.IterationRecord{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if line = bytes.TrimSpace(line); len(line) == 0 {
				continue
			}
			var r events.IterationRecord
			if err := json.Unmarshal(line, &r); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			out[p] = append(out[p], r)
		}
	}
	return out
}

// TestSharedMemoSameSignals runs every pattern on every window of the
// corpus three ways: with a memo of its own (Detect), with the memo the
// patterns before it filled (as Analyze does), and with one memo shared by
// every window of the trajectory, which puts records of other windows and
// other iterations under the same keys. All three must give the same
// signal.
func TestSharedMemoSameSignals(t *testing.T) {
	cfg := DefaultConfig()
	fired := 0
	for path, records := range corpusRecords(t) {
		trajectory := newMemo()
		for end := 1; end <= len(records); end++ {
			tw := taskWindow(records[:end], cfg.Window)
			window := newMemo()
			for _, p := range DefaultPatterns() {
				own := p.Detect(tw, cfg)
				mp := p.(memoPattern)
				if shared := mp.detect(window, tw, cfg); !reflect.DeepEqual(own, shared) {
					t.Errorf("%s, %s at iteration %d: with the window's memo %+v, alone %+v", filepath.Base(path), p.Name(), tw[len(tw)-1].Iteration, shared, own)
				}
				if long := mp.detect(trajectory, tw, cfg); !reflect.DeepEqual(own, long) {
					t.Errorf("%s, %s at iteration %d: with the trajectory's memo %+v, alone %+v", filepath.Base(path), p.Name(), tw[len(tw)-1].Iteration, long, own)
				}
				if own != nil {
					fired++
				}
			}
		}
	}
	if fired == 0 {
		t.Fatal("no pattern fired on the corpus: the comparison compared nothing")
	}
}

// stripNoiseEveryRegexp is stripNoise as it was before it learned to skip
// the expressions that cannot match: every one over the whole text.
func stripNoiseEveryRegexp(s string) string {
	s = timestampRE.ReplaceAllString(s, "<time>")
	s = clockRE.ReplaceAllString(s, "<time>")
	s = uuidRE.ReplaceAllString(s, "<id>")
	s = hexRE.ReplaceAllStringFunc(s, func(h string) string {
		if strings.HasPrefix(strings.ToLower(h), "0x") ||
			strings.ContainsAny(h, "0123456789") && strings.ContainsAny(strings.ToLower(h), "abcdef") {
			return "<hex>"
		}
		return h
	})
	return absPathRE.ReplaceAllString(s, "$1<path>")
}

// answerKeyEveryRegexp is answerKey of a successful output as it was.
func answerKeyEveryRegexp(out string) string {
	if strings.TrimSpace(out) == "" {
		return "quiet\x00"
	}
	return "ok\x00" + durationRE.ReplaceAllString(stripNoiseEveryRegexp(out), "<duration>")
}

// normalizeFailureEveryRegexp is normalizeFailure as it was.
func normalizeFailureEveryRegexp(s string) string {
	s = stripNoiseEveryRegexp(s)
	var b strings.Builder
	last := 0
	for _, span := range progressRE.FindAllStringIndex(s, -1) {
		b.WriteString(digitsRE.ReplaceAllString(s[last:span[0]], "0"))
		b.WriteString(s[span[0]:span[1]])
		last = span[1]
	}
	b.WriteString(digitsRE.ReplaceAllString(s[last:], "0"))
	return strings.Join(strings.Fields(b.String()), " ")
}

func TestStripNoiseSkipsOnlyWhatCannotMatch(t *testing.T) {
	texts := []string{
		"", "ok", "deadbeef", "effaced cafe", "deadbeef-dead-beef-dead-beefdeadbeef",
		"id 123e4567-e89b-12d3-a456-426614174000 failed", "at 0xc000123456", "0XFF", "commit a1b2c3d",
		"abcdef1", "abcdef", "2026-01-18T10:41:07.123Z boom", "2026/01/18 10:41:07 dial tcp",
		"took 10:41:07", "open /tmp/x/y.go: no such file", `C:\Users\x\a.go:3: bad`, "see ~/src/a.go",
		"https://host/x 404", "./main.go:3:1: undefined: x", "--- FAIL: TestCase3 (0.01s)\nFAIL",
		"2 of 3 updated, 45% done", "retrying in 250ms", "ok pkg 0.011s", "in 7s", "3µs", "5m 2h 9ns 4us", "x=/abs/path,y", "é 12:00:00 ü",
		"line one\n\tline two 7\n", "no digits, no dash, no colon",
	}
	for _, records := range corpusRecords(t) {
		for _, r := range records {
			texts = append(texts, r.AssistantText)
			for _, c := range r.ToolCalls {
				texts = append(texts, c.Output, c.Error, string(c.Args))
			}
		}
	}
	for _, s := range texts {
		if got, want := stripNoise(s), stripNoiseEveryRegexp(s); got != want {
			t.Errorf("stripNoise(%q) = %q, every regexp gives %q", s, got, want)
		}
		if got, want := newMemo().answerKey(events.ToolCall{Output: s}), answerKeyEveryRegexp(s); got != want {
			t.Errorf("answerKey of output %q = %q, every regexp gives %q", s, got, want)
		}
		if got, want := normalizeFailure(s), normalizeFailureEveryRegexp(s); got != want {
			t.Errorf("normalizeFailure(%q) = %q, every regexp gives %q", s, got, want)
		}
	}
}

// TestAlternationRunOfAsksNewestFirst holds the lazy alternationRunOf
// against the plain definition on random keys, and checks that it never
// asks for a key older than the run.
func TestAlternationRunOfAsksNewestFirst(t *testing.T) {
	plain := func(keys []string) int {
		n := len(keys)
		if n < 2 || keys[n-1] == "" || keys[n-2] == "" || keys[n-1] == keys[n-2] {
			return 0
		}
		run := 2
		for i := n - 3; i >= 0 && keys[i] == keys[i+2]; i-- {
			run++
		}
		return run
	}
	rng := rand.New(rand.NewPCG(1, 13))
	for range 5000 {
		keys := make([]string, rng.IntN(10))
		for i := range keys {
			keys[i] = []string{"", "a", "b", "c"}[rng.IntN(4)]
		}
		oldest := len(keys)
		got := alternationRunOf(len(keys), func(i int) string {
			oldest = min(oldest, i)
			return keys[i]
		})
		if want := plain(keys); got != want {
			t.Fatalf("alternationRunOf(%q) = %d, want %d", keys, got, want)
		}
		if got > 0 && oldest < len(keys)-got-1 {
			t.Fatalf("alternationRunOf(%q) = %d asked for key %d", keys, got, oldest)
		}
	}
}
