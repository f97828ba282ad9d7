package compaction

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Encode renders a plan as indented JSON with a final newline, byte for
// byte the same for the same plan: map keys are sorted, slices are never
// null, floats are rounded to four decimals when the plan is made, and
// `<`, `>` and `&` in ids stay readable.
func Encode(r Result) ([]byte, error) {
	if r.Ops == nil {
		r.Ops = []Op{}
	}
	if r.Skipped == nil {
		r.Skipped = []Skip{}
	}
	if r.Lanes == nil {
		r.Lanes = map[string]Lane{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("encode plan: %w", err)
	}
	return buf.Bytes(), nil
}
