package stuckbench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/jsontype"
	"github.com/ralphmesh/ralph/services/console"
	"github.com/ralphmesh/ralph/services/stuckdetector"
)

// LineError is a line of Scan input that is not a valid IterationRecord.
// Callers tell bad input (exit 2) from I/O failures with errors.As.
type LineError struct {
	Line int // 1-based, counting blank lines
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// scanSignal is one line of Scan output. Its field order is the contract
// (docs/REFERENCE.md, "Stuck signal"); Evidence is left out to keep lines
// short and stable.
type scanSignal struct {
	Iteration  int             `json:"iteration"`
	Pattern    string          `json:"pattern"`
	Confidence float64         `json:"confidence"`
	Action     events.Action   `json:"action"`
	Strength   events.Strength `json:"strength,omitempty"`
	Diagnosis  string          `json:"diagnosis"`
}

// Scan reads IterationRecords as JSONL from r (one per line, blank lines
// skipped), runs a Detector over them in order and writes one JSON line per
// signal to w: {"iteration":7,"pattern":"circular_tools","confidence":0.85,
// "action":"prune_context","strength":"strong","diagnosis":"..."}. Every line is validated before
// any is analyzed, so a file with a bad line produces a *LineError and no
// output at all, never a partial report. A nil patterns means
// stuckdetector.DefaultPatterns().
func Scan(r io.Reader, w io.Writer, cfg stuckdetector.Config, patterns []stuckdetector.Pattern) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("stuck scan config: %w", err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("read iteration records: %w", err)
	}
	records, err := parseRecords(data)
	if err != nil {
		return err
	}

	d := stuckdetector.NewDetector(cfg, patterns)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	// Diagnoses quote code and commands; keep `<`, `>` and `&` readable.
	enc.SetEscapeHTML(false)
	for _, rec := range records {
		s := d.Observe(rec)
		if s == nil {
			continue
		}
		line := scanSignal{s.Iteration, s.Pattern, s.Confidence, s.Action, s.Strength, s.Diagnosis}
		if err := enc.Encode(line); err != nil {
			return fmt.Errorf("encode signal for iteration %d: %w", s.Iteration, err)
		}
	}
	if out.Len() == 0 {
		return nil
	}
	// A diagnosis quotes the model; the JSON is printed for people too.
	if _, err := w.Write(console.EscapeJSON(out.Bytes())); err != nil {
		return fmt.Errorf("write signals: %w", err)
	}
	return nil
}

// parseRecords decodes and validates every non-blank line of data.
func parseRecords(data []byte) ([]events.IterationRecord, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // editors on Windows add a BOM
	var records []events.IterationRecord
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line) // also drops the \r of CRLF files
		if len(line) == 0 {
			continue
		}
		rec, err := parseRecord(line)
		if err != nil {
			return nil, &LineError{Line: i + 1, Err: err}
		}
		records = append(records, rec)
	}
	return records, nil
}

func parseRecord(line []byte) (events.IterationRecord, error) {
	var rec events.IterationRecord
	if !json.Valid(line) {
		// Valid only says no; Unmarshal says where and why.
		var v any
		err := json.Unmarshal(line, &v)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return rec, fmt.Errorf("not JSON: %w", err)
	}
	if line[0] != '{' {
		return rec, fmt.Errorf("not a JSON object: got %s", jsontype.Of(line))
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		return rec, jsontype.FieldError(err, "")
	}
	if err := rec.Validate(); err != nil {
		return rec, err
	}
	return rec, nil
}
