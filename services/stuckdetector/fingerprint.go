package stuckdetector

// This file is how the patterns recognise a call again: by what it asked
// for (its signature), by what it got (its outcome), and by the two together
// when a whole response repeats.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
)

// callSignature identifies a call by what it asks for: its name and its args
// as canonical JSON (keys sorted), so that key order or spacing in the
// model's output does not hide a repeat. Missing, null and {} args are the
// same request.
func callSignature(c events.ToolCall) string {
	if args := canonicalArgs(c.Args); args != "" {
		return c.Name + " " + args
	}
	return c.Name
}

func canonicalArgs(raw json.RawMessage) string {
	trimmed := bytes.TrimSpace(raw)
	v, ok := decodeJSON(trimmed)
	if !ok {
		// Not JSON (a builder bug or a hand-written record): compare the
		// bytes as they are rather than lose the call.
		return string(trimmed)
	}
	// OpenAI-style APIs deliver arguments as a JSON string holding JSON;
	// unwrap it so both encodings of a call compare equal.
	if s, isString := v.(string); isString {
		if inner, ok := decodeJSON([]byte(s)); ok {
			v = inner
		}
	}
	switch a := v.(type) {
	case nil:
		return ""
	case map[string]any:
		if len(a) == 0 {
			return ""
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Diagnoses quote the args; `a < b` reads better than `a \u003c b`.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return string(trimmed)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// decodeJSON decodes exactly one JSON value, keeping numbers as written so
// that canonical args do not round large integers.
func decodeJSON(b []byte) (any, bool) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, true
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if dec.More() {
		return nil, false
	}
	return v, true
}

// signatures is the call signature of every call of every record.
func (m *memo) signatures(records []events.IterationRecord) [][]string {
	sigs := make([][]string, len(records))
	for i, r := range records {
		sigs[i] = make([]string, len(r.ToolCalls))
		for j, c := range r.ToolCalls {
			sigs[i][j] = m.callSignature(c)
		}
	}
	return sigs
}

// repeatsOf counts, newest first, the calls with signature sig in stretch
// (sigs holds the signature of each call) whose outcome (as key tells it)
// is the newest such call's; the first different outcome ends the count,
// because the model may have been right to look again. It returns the
// count, the iterations involved (ascending) and the index of the record of
// the oldest counted call.
func repeatsOf(stretch []events.IterationRecord, sigs [][]string, sig string, key func(events.ToolCall) string) (count int, iters []int, first int) {
	var want string
	haveWant := false
	for i := len(stretch) - 1; i >= 0; i-- {
		calls := stretch[i].ToolCalls
		inRecord := false
		for j := len(calls) - 1; j >= 0; j-- {
			if sigs[i][j] != sig {
				continue
			}
			got := key(calls[j])
			if !haveWant {
				want, haveWant = got, true
			}
			if got != want {
				slices.Reverse(iters)
				return count, iters, first
			}
			count++
			inRecord = true
		}
		if inRecord {
			iters = append(iters, stretch[i].Iteration)
			first = i
		}
	}
	slices.Reverse(iters)
	return count, iters, first
}

// outcomeKey identifies what a call returned.
func outcomeKey(c events.ToolCall) string {
	return c.Output + "\x00" + c.Error + "\x00" + strconv.Itoa(c.ExitCode)
}

// callFingerprint is the multiset of (signature, outcome) of calls, sorted
// because the order of parallel tool calls is not meaningful.
func (m *memo) callFingerprint(calls []events.ToolCall) []string {
	fp := make([]string, len(calls))
	for i, c := range calls {
		fp[i] = m.callSignature(c) + "\x00" + outcomeKey(c)
	}
	slices.Sort(fp)
	return fp
}

// testsKey identifies a test outcome: the counts and the failing names as a
// set.
func testsKey(t *events.TestResult) string {
	names := slices.Clone(t.Failing)
	slices.Sort(names)
	return fmt.Sprintf("%d/%d/%s", t.Passed, t.Failed, strings.Join(names, "\x00"))
}
