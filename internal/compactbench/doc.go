// Package compactbench owns the compaction benchmark behind `ralph compact
// bench`: a long scripted drafting session (a builder reading the sources of
// twelve conference speakers, drafting a profile of each, then writing a
// programme overview that draws on all of them), replayed through five
// context strategies (no compaction, plain truncation, and the planner's
// legacy, tiered and tiered_adaptive modes carried out by the summarizer's
// own compaction step, summarizer.Executor.Compact, against a scripted
// summarizer model over HTTP), with a report of what each costs, what it
// keeps, and how much of each builder prompt repeats the previous one from
// its start, which is what a provider's prompt cache can reuse (prefix.go).
//
// The session is generated, not recorded: every unit has the shape and id
// the builder gives it (services/builder), so the planner sees what it would
// see in production, and the same inputs always give the same session. The
// builder's actions are fixed by the script, so only the context each
// strategy hands the builder differs; that is what the figures compare.
package compactbench
