package compaction

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/units"
)

// BenchmarkPlan2000Units plans a long session's context of 2,000 units
// (an assistant message, a file read, a command and a write each turn, over
// 286 turns) at the
// critical tier, in each mode that plans: the planner runs on every
// compaction request, so its cost is paid inside the step that asks.
//
//	go test -run '^$' -bench BenchmarkPlan2000Units ./pkg/compaction/
func BenchmarkPlan2000Units(b *testing.B) {
	doc := longSession(2000)
	for _, mode := range []Mode{ModeLegacy, ModeTiered, ModeTieredAdaptive} {
		b.Run(string(mode), func(b *testing.B) {
			o := opts(func(o *Options) { o.Mode = mode })
			var r Result
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if r, err = Plan(doc, o, History{}); err != nil {
					b.Fatal(err)
				}
			}
			if len(r.Ops) == 0 {
				b.Fatalf("tier %s: no op planned for %d units", r.Tier, len(doc.Units))
			}
			b.ReportMetric(float64(len(r.Ops)), "ops")
		})
	}
}

// longSession is a document of n units: the system prompt and the task,
// then per turn an assistant message and three tool calls with their
// results (seven units), the limit set so that the whole is just past the
// critical tier.
func longSession(n int) Document {
	const perUnit = 120
	b := newDoc(1, 0, "build the service")
	for turn := 1; len(b.doc.Units) < n; turn++ {
		id := func(kind string) string { return fmt.Sprintf("%s%d", kind, turn) }
		path := fmt.Sprintf("pkg/p%d/file%d.go", turn%40, turn)
		b.msg(id("m"), "assistant", turn, perUnit, "Next I look at "+path+" and run the tests.")
		b.tool(id("r"), turn, "read_file", pathArgs(path), 20, perUnit, strings.Repeat("package p\n", 30))
		b.tool(id("x"), turn, "run", runArgs("go test ./pkg/..."), 20, perUnit, "FAIL\tpkg/p\nerror: undefined: x\n")
		b.tool(id("w"), turn, "write_file", writeArgs(path, strings.Repeat("func f() {}\n", 20)), perUnit, 20, "wrote "+path)
		b.doc.CurrentTurn = turn
	}
	b.doc.Units = b.doc.Units[:n]
	if b.doc.Units[n-1].Kind == units.KindToolCall {
		// A call cut from its result would not be a valid document.
		b.doc.Units = b.doc.Units[:n-1]
	}
	total := 0
	for _, u := range b.doc.Units {
		total += u.Tokens
	}
	// Just past the critical ratio of the default options.
	b.doc.LimitTokens = int(float64(total) / (DefaultOptions().CriticalRatio + 0.02))
	return b.doc
}
