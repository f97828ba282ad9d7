package stuckdetector

// This file is how the patterns compare texts: as word 3-shingles of
// normalised tokens, by Jaccard similarity.

import (
	"strings"
	"unicode"
)

// textTokens normalizes text for comparison: lower case, words split at
// anything but letters and digits, and every run of digits replaced by 0 so
// that "attempt 3" and "attempt 4" are the same sentence.
func textTokens(s string) []string {
	fields := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	for i, f := range fields {
		var b strings.Builder
		inDigits := false
		for _, r := range f {
			if unicode.IsDigit(r) {
				if !inDigits {
					b.WriteByte('0')
				}
				inDigits = true
				continue
			}
			inDigits = false
			b.WriteRune(r)
		}
		fields[i] = b.String()
	}
	return fields
}

// shingles is the set of word 3-shingles of tokens. A text shorter than
// three words is one shingle, so short texts must match exactly.
func shingles(tokens []string) map[string]struct{} {
	set := map[string]struct{}{}
	if len(tokens) == 0 {
		return set
	}
	if len(tokens) < 3 {
		set[strings.Join(tokens, " ")] = struct{}{}
		return set
	}
	for i := 0; i+3 <= len(tokens); i++ {
		set[strings.Join(tokens[i:i+3], " ")] = struct{}{}
	}
	return set
}

// jaccard is |a∩b| / |a∪b|; 0 when both are empty.
func jaccard(a, b map[string]struct{}) float64 {
	inter := 0
	for s := range a {
		if _, ok := b[s]; ok {
			inter++
		}
	}
	union := len(a) + len(b) - inter
	if union == 0 {
		return 0
	}
	return float64(inter) / float64(union)
}
