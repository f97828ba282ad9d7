package stuckdetector

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ralphmesh/ralph/pkg/events"
)

// Repetition inside one response is degenerate decoding, as sure a sign as
// a repeated response; a chunk carried from response to response is a
// weaker one.
const (
	chantingWithinConfidence = 0.9
	chantingAcrossConfidence = 0.8
)

// Chanting fires when the model's text repeats a chunk of itself, whatever
// the chunk's sentence structure ("Thinking... Done." thirty times, a
// five-word thought, a passage of a hundred and fifty characters with no
// full stop in it):
//
//   - within the newest response, as a back-to-back repeat: a chunk of at
//     least ChantMinChars characters of normalised prose said ChantRepeats
//     times in a row ("A A A"; a cycle "A B A B A B" is the chunk "A B").
//     The repeats are found by hashing fixed-size character windows of the
//     text: a window seen again d characters later proposes d as the
//     length of a repeating chunk, and the text is then checked for how
//     many times in a row it repeats with that period;
//   - across responses, as the same passage of at least ChantCarryChars
//     characters closing each of the last ChantRepeats responses while the
//     rest of them differs and the workspace does not change. Responses
//     that are the same from end to end are repetitive_output's (or, with
//     different calls, a terse model's stock narration); a closing passage
//     carried along while the model edits files is a verbal tic.
//
// It stays quiet on text that repeats legitimately. Quoted material is left
// out: fenced code blocks, indented lines, "> " quotes and markdown tables,
// because code, logs and tables repeat lines ("if err != nil", "retrying
// connection to db", "| --- |"), and so are lines without a letter or a
// digit (dividers and rules). A chunk said again with other text between
// (a template under different headings, a phrase at the start and at the
// end of a long answer) is not back to back. List items that share a
// prefix differ after it, so they do not repeat as a whole, and digits are
// compared as written, so an enumeration ("case 1 ...", "case 2 ...") is
// not a chant either.
//
// The model is copying its own earlier output, which the context keeps
// feeding back to it: prune the context once the evidence is strong (more
// than ChantRepeats repeats); at the threshold, nudge.
type Chanting struct{}

// Name implements Pattern.
func (Chanting) Name() string { return "chanting" }

// Detect implements Pattern.
func (p Chanting) Detect(window []events.IterationRecord, cfg Config) *events.Signal {
	return p.detect(newMemo(), window, cfg)
}

func (p Chanting) detect(m *memo, window []events.IterationRecord, cfg Config) *events.Signal {
	cfg = cfg.withDefaults()
	if len(window) == 0 {
		return nil
	}
	if s := p.within(m, window[len(window)-1], cfg); s != nil {
		return s
	}
	return p.across(m, window, cfg)
}

func (p Chanting) within(m *memo, r events.IterationRecord, cfg Config) *events.Signal {
	// prose joins chunks with a space; one after the last chunk makes its
	// final repeat whole, like the others.
	rep, ok := backToBack(m.prose(r.AssistantText)+" ", cfg.ChantMinChars, cfg.ChantRepeats)
	if !ok {
		return nil
	}
	return graded(&events.Signal{
		Iteration:  r.Iteration,
		Pattern:    p.Name(),
		Confidence: chantingWithinConfidence,
		Diagnosis: fmt.Sprintf("%s repeats %q %d times back to back in one response",
			formatIterations([]int{r.Iteration}), truncate(rep.chunk), rep.times),
		Evidence: []int{r.Iteration},
	}, events.ActionPrune, rep.times, cfg.ChantRepeats, countOf(rep.times, "repeat"))
}

func (p Chanting) across(m *memo, window []events.IterationRecord, cfg Config) *events.Signal {
	n := cfg.ChantRepeats
	if len(window) < n {
		return nil
	}
	texts := make([]string, len(window))
	for i, r := range window {
		texts[i] = m.prose(r.AssistantText)
	}
	changed := workspaceChanges(window)
	recent := texts[len(texts)-n:]
	closing := commonClosing(recent)
	if utf8.RuneCountInString(closing) < cfg.ChantCarryChars || !hasWord(closing) {
		return nil
	}
	if slices.Contains(changed[len(window)-n+1:], true) {
		return nil
	}
	newestShingles := m.textShingles(window[len(window)-1].AssistantText)
	allSame := true
	for _, r := range window[len(window)-n : len(window)-1] {
		if jaccard(m.textShingles(r.AssistantText), newestShingles) < cfg.SimilarityThreshold {
			allSame = false
		}
	}
	if allSame {
		return nil
	}
	// How many responses in a row, with the workspace unchanged between
	// them, close with the passage.
	run := longestRun(n, len(window), func(k int) bool {
		i := len(window) - k
		return closesWith(texts[i], closing) && !changed[i+1]
	})
	evidence := iterationsOf(window[len(window)-run:])
	return graded(&events.Signal{
		Iteration:  window[len(window)-1].Iteration,
		Pattern:    p.Name(),
		Confidence: chantingAcrossConfidence,
		Diagnosis: fmt.Sprintf("%s each end with %q while the workspace stays the same",
			formatIterations(evidence), truncate(closing)),
		Evidence: evidence,
	}, events.ActionPrune, run, n, countOf(run, "response"))
}

// prose is the model's own text of s, normalised for comparison: quoted
// material (fenced code blocks, lines indented by a tab or four spaces,
// "> " quotes, markdown table rows) and lines without a letter or a digit
// left out, the rest with every run of white space, line breaks included,
// made one space. Case is kept: a chant is a verbatim copy, and the
// diagnosis quotes it as the model wrote it.
func prose(s string) string {
	var b strings.Builder
	inFence := false
	for _, line := range strings.Split(s, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			inFence = !inFence
			continue
		}
		if inFence || strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "    ") ||
			strings.HasPrefix(trimmed, ">") || strings.HasPrefix(trimmed, "|") || !hasWord(trimmed) {
			continue
		}
		for _, f := range strings.Fields(trimmed) {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(f)
		}
	}
	return b.String()
}

// hasWord reports whether s has a letter or a digit.
func hasWord(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0
}

// repeat is a chunk of text said several times back to back.
type repeat struct {
	chunk string // as it reads, starting at a word
	times int
}

// backToBack finds in t the chunk of at least minChunk bytes repeated the
// most times in a row, and reports it if that is at least minTimes.
//
// Every window of minChunk bytes is hashed (as a map key); a window seen
// again d bytes later proposes d as a chunk length. Text made of a chunk
// repeated k times in a row has about (k-1)*d windows seen again exactly d
// bytes later, so only distances proposed by at least d-minChunk+1 windows
// (one chunk's worth; fewer cannot be two repeats) are checked, each in one
// pass over t: the longest stretch in which every byte equals the byte d
// further on is (times-1)*d bytes long. Checking only those distances keeps
// long ordinary text, whose repeated windows are scattered, cheap.
func backToBack(t string, minChunk, minTimes int) (repeat, bool) {
	if len(t) < minChunk*minTimes {
		return repeat{}, false
	}
	last := map[string]int{}
	proposed := map[int]int{}
	for p := 0; p+minChunk <= len(t); p++ {
		w := t[p : p+minChunk]
		if q, ok := last[w]; ok {
			proposed[p-q]++
		}
		last[w] = p
	}
	var best repeat
	bestStart, bestLen := 0, 0
	distances := make([]int, 0, len(proposed))
	for d, n := range proposed {
		if d >= minChunk && n >= d-minChunk+1 {
			distances = append(distances, d)
		}
	}
	// Shorter chunks first: "A A A A" is also "AA AA", twice.
	slices.Sort(distances)
	for _, d := range distances {
		start, run := 0, 0
		for x := 0; x+d < len(t); x++ {
			if t[x] != t[x+d] {
				run = 0
				continue
			}
			if run == 0 {
				start = x
			}
			run++
			if times := run/d + 1; times > best.times {
				best.times, bestStart, bestLen = times, start, d
			}
		}
	}
	if best.times < minTimes {
		return repeat{}, false
	}
	chunk := t[bestStart : bestStart+bestLen]
	if !hasWord(chunk) {
		return repeat{}, false
	}
	best.chunk = atWordStart(chunk, bestStart == 0 || t[bestStart-1] == ' ')
	return best, true
}

// atWordStart rotates a repeating chunk so that it starts at a word: the
// repeated stretch may begin a few bytes before the chunk as written
// (". " that ends the text before it and the chunk alike). startsWord says
// whether chunk[0] already starts a word.
func atWordStart(chunk string, startsWord bool) string {
	for i := 0; i < len(chunk); i++ {
		r, _ := utf8.DecodeRuneInString(chunk[i:])
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			continue
		}
		if (i == 0 && startsWord) || (i > 0 && chunk[i-1] == ' ') {
			return strings.TrimSpace(chunk[i:] + chunk[:i])
		}
	}
	return strings.TrimSpace(chunk)
}

// closesWith reports whether t ends with the passage closing, starting at a
// word of t.
func closesWith(t, closing string) bool {
	return strings.HasSuffix(t, closing) && (len(t) == len(closing) || t[len(t)-len(closing)-1] == ' ')
}

// commonClosing is the longest passage, starting at a word, that every one
// of texts ends with.
func commonClosing(texts []string) string {
	if len(texts) == 0 {
		return ""
	}
	suffix := texts[0]
	for _, t := range texts[1:] {
		n := 0
		for n < len(suffix) && n < len(t) && suffix[len(suffix)-1-n] == t[len(t)-1-n] {
			n++
		}
		suffix = suffix[len(suffix)-n:]
	}
	// Cut to a word boundary: "...ed. I will ..." and "...ad. I will ..."
	// share "d. I will ...", which is not a passage.
	for _, t := range texts {
		if len(suffix) < len(t) && t[len(t)-len(suffix)-1] != ' ' {
			i := strings.IndexByte(suffix, ' ')
			if i < 0 {
				return ""
			}
			suffix = suffix[i+1:]
			break
		}
	}
	return suffix
}
