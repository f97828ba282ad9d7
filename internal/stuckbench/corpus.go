package stuckbench

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/jsontype"
)

// corpusFiles is the labelled corpus, embedded so that `ralph stuck bench`
// runs it from any directory.
//
//go:embed corpus/*.jsonl corpus/labels.json
var corpusFiles embed.FS

// LabelsFile is the corpus manifest's name.
const LabelsFile = "labels.json"

// CorpusFS is the labelled corpus shipped with the package: LabelsFile and
// one IterationRecord JSONL file per trajectory (each one valid input for
// `ralph stuck scan`), at the root of the returned FS.
func CorpusFS() fs.FS {
	sub, err := fs.Sub(corpusFiles, "corpus")
	if err != nil {
		// fs.Sub fails only for an invalid path; "corpus" is a constant.
		panic(fmt.Sprintf("stuckbench: corpus FS: %v", err))
	}
	return sub
}

// ShippedCorpus loads CorpusFS.
func ShippedCorpus() (Corpus, error) { return LoadCorpus(CorpusFS()) }

// Label says whether a trajectory gets stuck.
type Label string

// The two labels.
const (
	LabelStuck   Label = "stuck"
	LabelHealthy Label = "healthy"
)

// Trajectory is one labelled file of a corpus: its manifest entry and its
// records.
type Trajectory struct {
	// File is the JSONL file's name, relative to the corpus root.
	File  string `json:"file"`
	Label Label  `json:"label"`
	// Pattern is the pattern a stuck trajectory should be reported as.
	Pattern string `json:"pattern,omitempty"`
	// Onset is the first iteration that belongs to the loop of a stuck
	// trajectory: the first one that repeats what the trajectory already
	// did (a re-read, a retry, a restatement, a return to an earlier
	// state) or, for a stall, the first attempt after which the outcome is
	// still what it was. The healthy step the loop then goes round (the
	// first read, the first run that showed the failure, the first claim)
	// is not part of it.
	Onset int `json:"onset,omitempty"`
	// Resembles names the pattern a healthy trajectory is a look-alike of:
	// the one a sloppy detector would report on it.
	Resembles string `json:"resembles,omitempty"`
	// Kind names what makes a healthy trajectory look like a loop, in
	// lower_snake_case ("distinct_reads", "polling_with_progress",
	// "code_blocks"): the evaluation reports false positives by kind, so
	// that a detector that mistakes a kind of healthy work for a loop shows
	// it as such.
	Kind        string `json:"kind,omitempty"`
	Description string `json:"description"`

	Records []events.IterationRecord `json:"-"`
}

// Corpus is a set of labelled trajectories, in manifest order.
type Corpus struct {
	Trajectories []Trajectory
}

var snakeCaseRE = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// LoadCorpus reads a corpus from fsys: LabelsFile, a JSON object
// {"trajectories": [{"file", "label", "pattern", "onset", "resembles",
// "kind", "description"}, ...]}, and every file it lists. Each file is read with
// the decoder `ralph stuck scan` uses. Every JSONL file at the root must be
// listed, so that a trajectory cannot silently drop out of an evaluation.
// Errors name the file and, where there is one, the line.
func LoadCorpus(fsys fs.FS) (Corpus, error) {
	data, err := fs.ReadFile(fsys, LabelsFile)
	if err != nil {
		return Corpus{}, fmt.Errorf("load corpus: %w", err)
	}
	entries, lines, err := decodeManifest(data)
	if err != nil {
		return Corpus{}, fmt.Errorf("load corpus: %s: %w", LabelsFile, err)
	}

	listed := map[string]bool{}
	c := Corpus{Trajectories: make([]Trajectory, 0, len(entries))}
	for i, t := range entries {
		where := fmt.Sprintf("%s: line %d: trajectories[%d]", LabelsFile, lines[i], i)
		if err := t.validate(); err != nil {
			return Corpus{}, fmt.Errorf("load corpus: %s: %w", where, err)
		}
		if listed[t.File] {
			return Corpus{}, fmt.Errorf("load corpus: %s: field file: %s is listed twice", where, t.File)
		}
		listed[t.File] = true
		raw, err := fs.ReadFile(fsys, t.File)
		if err != nil {
			return Corpus{}, fmt.Errorf("load corpus: %s: %w", where, err)
		}
		t.Records, err = parseRecords(raw)
		if err != nil {
			return Corpus{}, fmt.Errorf("load corpus: %s: %w", t.File, err)
		}
		if len(t.Records) == 0 {
			return Corpus{}, fmt.Errorf("load corpus: %s: no iteration records", t.File)
		}
		if t.Label == LabelStuck && !slices.ContainsFunc(t.Records, func(r events.IterationRecord) bool { return r.Iteration == t.Onset }) {
			return Corpus{}, fmt.Errorf("load corpus: %s: field onset: %s has no iteration %d", where, t.File, t.Onset)
		}
		c.Trajectories = append(c.Trajectories, t)
	}

	files, err := fs.Glob(fsys, "*.jsonl")
	if err != nil {
		return Corpus{}, fmt.Errorf("load corpus: list trajectories: %w", err)
	}
	for _, f := range files {
		if !listed[f] {
			return Corpus{}, fmt.Errorf("load corpus: %s: not listed in %s", f, LabelsFile)
		}
	}
	return c, nil
}

// validate checks a manifest entry on its own.
func (t Trajectory) validate() error {
	switch {
	case t.File == "":
		return errors.New("field file: required")
	case path.Ext(t.File) != ".jsonl" || !fs.ValidPath(t.File) || strings.Contains(t.File, "/"):
		return fmt.Errorf("field file: %q must be a .jsonl file at the corpus root", t.File)
	case strings.TrimSpace(t.Description) == "":
		return fmt.Errorf("field description: required (%s)", t.File)
	}
	switch t.Label {
	case LabelStuck:
		if !snakeCaseRE.MatchString(t.Pattern) {
			return fmt.Errorf("field pattern: %q is not a lower_snake_case pattern name (%s)", t.Pattern, t.File)
		}
		if t.Onset < 1 {
			return fmt.Errorf("field onset: must be >= 1 for a stuck trajectory, got %d (%s)", t.Onset, t.File)
		}
		if t.Resembles != "" || t.Kind != "" {
			return fmt.Errorf("fields resembles and kind: only for healthy trajectories (%s)", t.File)
		}
	case LabelHealthy:
		if t.Pattern != "" || t.Onset != 0 {
			return fmt.Errorf("fields pattern and onset: only for stuck trajectories (%s)", t.File)
		}
		if t.Resembles != "" && !snakeCaseRE.MatchString(t.Resembles) {
			return fmt.Errorf("field resembles: %q is not a lower_snake_case pattern name (%s)", t.Resembles, t.File)
		}
		if t.Kind != "" && !snakeCaseRE.MatchString(t.Kind) {
			return fmt.Errorf("field kind: %q is not a lower_snake_case name (%s)", t.Kind, t.File)
		}
	default:
		return fmt.Errorf("field label: must be %q or %q, got %q (%s)", LabelStuck, LabelHealthy, t.Label, t.File)
	}
	return nil
}

// decodeManifest decodes the manifest strictly (unknown fields are errors:
// a misspelt "onset" must not silently become 0) and returns, for each
// entry, the line it starts on.
func decodeManifest(data []byte) ([]Trajectory, []int, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	fail := func(err error) ([]Trajectory, []int, error) {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return nil, nil, fmt.Errorf("line %d: %w", lineAt(data, se.Offset), err)
		case errors.As(err, &te):
			return nil, nil, fmt.Errorf("line %d: field %s: want %s, got %s", lineAt(data, te.Offset), te.Field, jsontype.For(te.Type), te.Value)
		}
		return nil, nil, fmt.Errorf("line %d: %w", lineAt(data, dec.InputOffset()), err)
	}
	expect := func(want json.Delim) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if tok != want {
			return fmt.Errorf("want %q, got %v", want, tok)
		}
		return nil
	}

	if err := expect('{'); err != nil {
		return fail(err)
	}
	var (
		entries []Trajectory
		lines   []int
		seen    bool
	)
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		if key != "trajectories" {
			return fail(fmt.Errorf("unknown field %q", key))
		}
		seen = true
		if err := expect('['); err != nil {
			return fail(err)
		}
		for dec.More() {
			start := dec.InputOffset()
			var t Trajectory
			if err := dec.Decode(&t); err != nil {
				return fail(err)
			}
			entries = append(entries, t)
			lines = append(lines, lineAt(data, skipSeparators(data, start)))
		}
		if err := expect(']'); err != nil {
			return fail(err)
		}
	}
	if err := expect('}'); err != nil {
		return fail(err)
	}
	if !seen {
		return nil, nil, errors.New("field trajectories: required")
	}
	return entries, lines, nil
}

// skipSeparators moves off past the whitespace and comma that the decoder
// leaves before the next value.
func skipSeparators(data []byte, off int64) int64 {
	for off < int64(len(data)) && strings.IndexByte(" \t\r\n,", data[off]) >= 0 {
		off++
	}
	return off
}

// lineAt is the 1-based line of byte offset off.
func lineAt(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return bytes.Count(data[:off], []byte("\n")) + 1
}
