package stuckdetector

import (
	"testing"
)

func TestSimilarity(t *testing.T) {
	tests := []struct {
		a, b string
		want float64
	}{
		{"Let me check.", "let  ME check", 1},
		{"Attempt 3 failed", "attempt 42 failed", 1},
		{"Let me check.", "Let me check again.", 0.5},
		{"Done", "Finished", 0},
		{"a b c d e", "a b c d f", 2.0 / 4},
	}
	for _, tc := range tests {
		got := jaccard(shingles(textTokens(tc.a)), shingles(textTokens(tc.b)))
		if got != tc.want {
			t.Errorf("similarity(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
