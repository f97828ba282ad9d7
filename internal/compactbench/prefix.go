package compactbench

import (
	"strings"

	"github.com/ralphmesh/ralph/pkg/units"
)

// Prompt-cache reuse. A provider caches the longest repeated prefix of a
// prompt, and every rewrite of the context breaks it from the first changed
// unit on. The benchmark measures, for each builder call, how much of its
// prompt repeats the previous call's prompt from the start:
//
//   - units are compared in order, as the model sees them (role, content,
//     tool call id and name, and each call's name and arguments); every
//     unit equal to the one at the same position of the previous prompt
//     counts its tokens;
//   - in the first unit that differs, the whole lines both renderings
//     share from the start count too (a checkpoint that only grew at its
//     end keeps its old lines), measured with the builder's tokenizer and
//     never more than the unit's own tokens;
//   - nothing after the first differing unit counts, however much of it
//     is unchanged.
//
// The first call reuses nothing. The share is the reused tokens over the
// prompt tokens (the builder's input tokens), summed over every call.

// prefixReuse is the reused-prefix tokens of prompt cur given the previous
// prompt prev, and whether cur extends prev whole (every unit of prev is
// the prefix of cur).
func prefixReuse(prev, cur []units.Unit, count func(string) int) (tokens int, extends bool) {
	k := 0
	for k < len(prev) && k < len(cur) && sameUnit(prev[k], cur[k]) {
		tokens += cur[k].Tokens
		k++
	}
	if k == len(prev) {
		return tokens, true
	}
	if k < len(cur) && prev[k].Role == cur[k].Role {
		shared := commonLines(rendering(prev[k]), rendering(cur[k]))
		if shared != "" {
			tokens += min(count(shared), cur[k].Tokens)
		}
	}
	return tokens, false
}

// sameUnit: the model is sent the same message for both.
func sameUnit(a, b units.Unit) bool {
	if a.Role != b.Role || a.Content != b.Content || a.CallID != b.CallID || a.Tool != b.Tool || len(a.Calls) != len(b.Calls) {
		return false
	}
	for i := range a.Calls {
		if a.Calls[i] != b.Calls[i] {
			return false
		}
	}
	return true
}

// rendering is the text of a unit as the builder counts it: its content,
// then each call's name and arguments.
func rendering(u units.Unit) string {
	var b strings.Builder
	b.WriteString(u.Content)
	for _, c := range u.Calls {
		b.WriteString("\n")
		b.WriteString(c.ID)
		b.WriteString("\n")
		b.WriteString(c.Name)
		b.WriteString("\n")
		b.WriteString(c.Args)
	}
	return b.String()
}

// commonLines is the longest run of whole lines (each with its line break)
// that a and b both start with.
func commonLines(a, b string) string {
	n := 0
	for {
		i := strings.IndexByte(a[n:], '\n')
		if i < 0 || n+i >= len(b) || a[n:n+i+1] != b[n:n+i+1] {
			return a[:n]
		}
		n += i + 1
	}
}

// cacheReuse sums the prefix reuse of a run's builder calls, in order.
type cacheReuse struct {
	prev []units.Unit
	// Reused is the prefix tokens reused; Extending the calls whose prompt
	// extends the previous one whole; Calls the calls seen.
	Reused, Extending, Calls int
}

func (c *cacheReuse) call(prompt []units.Unit, count func(string) int) {
	if c.Calls > 0 {
		t, ext := prefixReuse(c.prev, prompt, count)
		c.Reused += t
		if ext {
			c.Extending++
		}
	}
	c.Calls++
	c.prev = prompt
}
