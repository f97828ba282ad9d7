package stuckdetector

// This file is the wording of diagnoses: iterations, calls and hashes as a
// person reads them, and quotes bounded in length.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ralphmesh/ralph/pkg/events"
)

// maxQuoteRunes bounds quoted text and call signatures in a diagnosis: a
// write_file call's args can be a whole file, and the diagnosis goes into
// logs, events and the pruner's prompt.
const maxQuoteRunes = 100

func iterationsOf(records []events.IterationRecord) []int {
	its := make([]int, len(records))
	for i, r := range records {
		its[i] = r.Iteration
	}
	return its
}

// formatIterations renders ascending iterations as "iteration 4",
// "iterations 4-6" or "iterations 2, 4 and 7".
func formatIterations(its []int) string {
	switch len(its) {
	case 0:
		return "no iterations"
	case 1:
		return "iteration " + strconv.Itoa(its[0])
	}
	contiguous := true
	for i := 1; i < len(its); i++ {
		if its[i] != its[i-1]+1 {
			contiguous = false
			break
		}
	}
	if contiguous {
		return fmt.Sprintf("iterations %d-%d", its[0], its[len(its)-1])
	}
	parts := make([]string, len(its)-1)
	for i, it := range its[:len(its)-1] {
		parts[i] = strconv.Itoa(it)
	}
	return fmt.Sprintf("iterations %s and %d", strings.Join(parts, ", "), its[len(its)-1])
}

// describeCalls lists the distinct signatures of calls in order.
func describeCalls(calls []events.ToolCall) string {
	var sigs []string
	for _, c := range calls {
		if s := truncate(callSignature(c)); !slices.Contains(sigs, s) {
			sigs = append(sigs, s)
		}
	}
	return strings.Join(sigs, ", ")
}

// countNames summarizes calls by tool name, most used first: "read_file x4,
// bash x1".
func countNames(calls []events.ToolCall) string {
	counts := map[string]int{}
	var names []string
	for _, c := range calls {
		if counts[c.Name] == 0 {
			names = append(names, c.Name)
		}
		counts[c.Name]++
	}
	slices.SortStableFunc(names, func(a, b string) int {
		if d := counts[b] - counts[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s x%d", n, counts[n])
	}
	return strings.Join(parts, ", ")
}

// shortHash is enough of a hash to compare by eye, like git's short ids.
// The algorithm prefix the builder writes ("sha256:") would use up most of
// it and is the same on every hash, so it goes.
func shortHash(h string) string {
	if algo, hex, ok := strings.Cut(h, ":"); ok && algo != "" && hex != "" && !strings.ContainsAny(algo, " /") {
		h = hex
	}
	if r := []rune(h); len(r) > 12 {
		return string(r[:12])
	}
	return h
}

// truncate shortens s to maxQuoteRunes runes, marking the cut.
func truncate(s string) string {
	if utf8.RuneCountInString(s) <= maxQuoteRunes {
		return s
	}
	r := []rune(s)
	return string(r[:maxQuoteRunes]) + "..."
}

// countOf is "1 call" or "3 calls".
func countOf(n int, noun string) string {
	if n != 1 {
		noun += "s"
	}
	return fmt.Sprintf("%d %s", n, noun)
}
