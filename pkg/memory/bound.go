package memory

import "slices"

// keepOrder is the order Bound gives sections up in, last first: errors
// with their solutions and the critical context (conventions, commands
// that work) are what a later task would otherwise rediscover; decisions
// come next; files changed last, since the workspace and its history say
// them again.
var keepOrder = []Section{ErrorsAndSolutions, CriticalContext, KeyDecisions, ModifiedFiles}

// Bound is the extractive re-summary: notes kept whole within maxTokens
// (as Render writes them, counted by count), taken section by section in
// keepOrder and, within a section, newest first; the kept ones stay in
// their order. Nothing is cut: a note that does not fit is left out whole.
// It also returns how many notes were left out.
func Bound(ns Notes, maxTokens int, count func(string) int) (Notes, int) {
	count = counter(count)
	if count(ns.Render()) <= maxTokens {
		return ns, 0
	}
	var order []int
	for _, s := range keepOrder {
		for i := len(ns) - 1; i >= 0; i-- {
			if ns[i].Section == s {
				order = append(order, i)
			}
		}
	}
	keep := make([]bool, len(ns))
	opened := map[Section]bool{}
	used := 0
	for _, i := range order {
		cost := count(ns[i].bullet()) + 1
		if !opened[ns[i].Section] {
			cost += count(ns[i].Section.Heading()) + 2
		}
		if used+cost > maxTokens {
			continue
		}
		keep[i], opened[ns[i].Section] = true, true
		used += cost
	}
	kept := func() Notes {
		var out Notes
		for i, n := range ns {
			if keep[i] {
				out = append(out, n)
			}
		}
		return out
	}
	// The per-note costs only estimate the rendered text's: give up the
	// least kept ones until it fits.
	out := kept()
	for k := len(order) - 1; k >= 0 && count(out.Render()) > maxTokens; k-- {
		if keep[order[k]] {
			keep[order[k]] = false
			out = kept()
		}
	}
	return out, len(ns) - len(out)
}

// counter is count, or about four bytes a token when nil.
func counter(count func(string) int) func(string) int {
	if count != nil {
		return count
	}
	return func(s string) int { return (len(s) + 3) / 4 }
}

// Tasks are the tasks the notes came from, each once, in order.
func (ns Notes) Tasks() []string {
	var out []string
	for _, n := range ns {
		if n.Task != "" && !slices.Contains(out, n.Task) {
			out = append(out, n.Task)
		}
	}
	return out
}
