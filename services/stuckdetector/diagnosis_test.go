package stuckdetector

import (
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

func TestFormatIterations(t *testing.T) {
	tests := []struct {
		its  []int
		want string
	}{
		{[]int{4}, "iteration 4"},
		{[]int{4, 5, 6}, "iterations 4-6"},
		{[]int{2, 4}, "iterations 2 and 4"},
		{[]int{2, 4, 7}, "iterations 2, 4 and 7"},
	}
	for _, tc := range tests {
		if got := formatIterations(tc.its); got != tc.want {
			t.Errorf("formatIterations(%v) = %q, want %q", tc.its, got, tc.want)
		}
	}
}

func TestDiagnosisTruncatesLongArgs(t *testing.T) {
	big := strings.Repeat("x", 5000)
	c := call("write_file", `{"path":"a.go","content":"`+big+`"}`, "ok")
	window := []events.IterationRecord{rec(1, "T1", calls(c)), rec(2, "T1", calls(c)), rec(3, "T1", calls(c))}
	s := (CircularTools{}).Detect(window, DefaultConfig())
	if s == nil {
		t.Fatal("no signal")
	}
	if len(s.Diagnosis) > 300 {
		t.Errorf("diagnosis is %d bytes, want it bounded: %s", len(s.Diagnosis), s.Diagnosis)
	}
}

func TestShortHash(t *testing.T) {
	tests := []struct{ in, want string }{
		{"sha256:3f7a9c21d4e8b6051c2e", "3f7a9c21d4e8"},
		{"9f2c1a7e0b3d55aa", "9f2c1a7e0b3d"},
		{"c3", "c3"},
		{"sha256:", "sha256:"},
	}
	for _, tc := range tests {
		if got := shortHash(tc.in); got != tc.want {
			t.Errorf("shortHash(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
