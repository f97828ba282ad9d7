package stuckdetector

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Repetition inside one response is degenerate decoding, as sure a sign as
// a repeated response; a chunk carried from response to response is a
// weaker one.
const (
	chantingWithinConfidence = 0.9
	chantingAcrossConfidence = 0.8
)

// Chanting fires when the model's text repeats a chunk (a sentence or a
// line of at least ChantMinWords words) ChantRepeats times:
//
//   - within the newest response, as a cycle: the chunk comes back with the
//     same text between each occurrence ("A. B. A. B. A. B." or "A. A. A.").
//     A report that says the same sentence under different headings ("###
//     a.go / No change needed ...", "### b.go / ...") is a template, not a
//     chant, and the cycle rule tells the two apart;
//   - across responses, as the same chunk closing each of the last
//     ChantRepeats responses while the rest of them differs and the
//     workspace does not change. Responses that are the same from end to
//     end are repetitive_output's (or, with different calls, a terse
//     model's stock narration); a closing chunk carried along while the
//     model edits files is a verbal tic.
//
// Quoted material is skipped: fenced code blocks, indented lines and
// "> " quotes, because code and logs repeat lines legitimately ("retrying
// connection to db" five times is the log's chant, not the model's). Words
// are compared as written, digits included, so an enumeration ("case 1
// ...", "case 2 ...") is not a chant.
//
// The model is copying its own earlier output, which the context keeps
// feeding back to it: prune the context.
type Chanting struct{}

// Name implements Pattern.
func (Chanting) Name() string { return "chanting" }

// Detect implements Pattern.
func (p Chanting) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	if len(window) == 0 {
		return nil
	}
	newest := window[len(window)-1]
	if s := p.within(newest, cfg); s != nil {
		return s
	}
	return p.across(window, cfg)
}

func (p Chanting) within(r events.IterationRecord, cfg Config) *events.Signal {
	chunks := textChunks(r.AssistantText)
	for i, c := range chunks {
		if len(c.words) < cfg.ChantMinWords {
			continue
		}
		var at []int
		for j := i; j < len(chunks); j++ {
			if chunks[j].key == c.key {
				at = append(at, j)
			}
		}
		if len(at) < cfg.ChantRepeats {
			continue
		}
		if n := cycleCount(chunks, at); n >= cfg.ChantRepeats {
			return &events.Signal{
				Iteration:  r.Iteration,
				Pattern:    p.Name(),
				Confidence: chantingWithinConfidence,
				Action:     events.ActionPrune,
				Diagnosis: fmt.Sprintf("%s repeats %q %d times in one response",
					formatIterations([]int{r.Iteration}), truncate(c.text), n),
				Evidence: []int{r.Iteration},
			}
		}
	}
	return nil
}

// cycleCount is how many of the occurrences at (indices into chunks, the
// first one first) follow one another with the same chunks in between as
// between the first two.
func cycleCount(chunks []chunk, at []int) int {
	gap := keysOf(chunks[at[0]+1 : at[1]])
	n := 2
	for k := 2; k < len(at); k++ {
		if !slices.Equal(keysOf(chunks[at[k-1]+1:at[k]]), gap) {
			break
		}
		n++
	}
	return n
}

func (p Chanting) across(window []events.IterationRecord, cfg Config) *events.Signal {
	n := cfg.ChantRepeats
	if len(window) < n {
		return nil
	}
	changed := workspaceChanges(window)
	if slices.Contains(changed[len(window)-n+1:], true) {
		return nil
	}
	recent := window[len(window)-n:]
	var closing chunk
	allSame := true
	newestShingles := shingles(textTokens(recent[n-1].AssistantText))
	for i, r := range recent {
		chunks := textChunks(r.AssistantText)
		if len(chunks) == 0 {
			return nil
		}
		last := chunks[len(chunks)-1]
		if i == 0 {
			closing = last
		} else if last.key != closing.key {
			return nil
		}
		if i < n-1 && jaccard(shingles(textTokens(r.AssistantText)), newestShingles) < cfg.SimilarityThreshold {
			allSame = false
		}
	}
	if len(closing.words) < cfg.ChantMinWords || allSame {
		return nil
	}
	evidence := iterationsOf(recent)
	return &events.Signal{
		Iteration:  recent[n-1].Iteration,
		Pattern:    p.Name(),
		Confidence: chantingAcrossConfidence,
		Action:     events.ActionPrune,
		Diagnosis: fmt.Sprintf("%s each end with %q while the workspace stays the same",
			formatIterations(evidence), truncate(closing.text)),
		Evidence: evidence,
	}
}

// chunk is a sentence or line of a response.
type chunk struct {
	text  string   // as written, trimmed
	words []string // lower case, as written otherwise
	key   string
}

// textChunks splits s into sentences and lines, leaving out quoted
// material (fenced code blocks, lines indented by a tab or four spaces,
// "> " quotes) and chunks without words.
func textChunks(s string) []chunk {
	var chunks []chunk
	inFence := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence || strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "    ") || strings.HasPrefix(strings.TrimSpace(line), ">") {
			continue
		}
		for _, sentence := range splitSentences(line) {
			words := strings.FieldsFunc(strings.ToLower(sentence), func(r rune) bool {
				return !unicode.IsLetter(r) && !unicode.IsDigit(r)
			})
			if len(words) == 0 {
				continue
			}
			chunks = append(chunks, chunk{text: strings.TrimSpace(sentence), words: words, key: strings.Join(words, " ")})
		}
	}
	return chunks
}

// splitSentences cuts a line after '.', '!' or '?' followed by a space, so
// that "pkg/a.go" and "v1.2" stay whole.
func splitSentences(line string) []string {
	var out []string
	start := 0
	for i := 0; i+1 < len(line); i++ {
		if (line[i] == '.' || line[i] == '!' || line[i] == '?') && line[i+1] == ' ' {
			out = append(out, line[start:i+1])
			start = i + 1
		}
	}
	return append(out, line[start:])
}

func keysOf(chunks []chunk) []string {
	keys := make([]string, len(chunks))
	for i, c := range chunks {
		keys[i] = c.key
	}
	return keys
}
