// Package compaction owns the compaction planner: given the Builder's context
// units, the model's token limit and the task, it decides which units stay
// raw and which are compacted, replaced by a pointer to an artifact or merged
// into the running checkpoint, in which order, and why the others were
// skipped (docs/ARCHITECTURE.md, "Compaction"; docs/REFERENCE.md, "Plan").
//
// A plan also keeps the model provider's prompt cache in mind, which
// serves the longest repeated prefix of a prompt and is broken by every
// rewrite from the first changed unit on: the stable head (StableHead) is
// never rewritten, and in tiered_adaptive mode compaction is deep and
// seldom (a target well below the trigger; a plan under pressure that
// cannot reach it waits) and takes the oldest run of stale units as one
// checkpoint merge.
//
// The planner is pure and deterministic: no NATS, Redis, clock or LLM inside.
// It never produces text, let alone cut text; its operations describe what
// the executor (the Summarizer's LLM, or a pointer to an artifact) will do.
// Even the optional advisor, a model that may reorder near-tied candidates
// that already passed every gate, is not called from here: Plan returns the
// near ties, the caller asks (at most once per iteration, under a timeout),
// and ApplyAdvice checks the answer and re-plans in that order. Without an
// answer, or with a wrong one, the plan is the same.
//
// The package also holds the pure helpers the Summarizer uses around a plan:
// the cache key of a compaction result (CacheKey, OpPayload), the realised
// ratio and cooldown bookkeeping (History), an extractive fallback for when
// the LLM is unavailable (Extract) and the check that a summary still names
// every modified file and unresolved error (MissingFacts, AppendMissingFacts).
package compaction
