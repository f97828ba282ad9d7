// Package compaction owns the compaction planner: given the Builder's context
// units, the model's token limit and the task, it decides which units stay
// raw and which are compacted, replaced by a pointer to an artifact or merged
// into the running checkpoint, in which order, and why the others were
// skipped (DESIGN.md section 3, CONTRACT.md "compact plan").
//
// The planner is pure and deterministic: no NATS, Redis, clock or LLM inside.
// It never produces text, let alone cut text; its operations describe what
// the executor (the Summarizer's LLM, or a pointer to an artifact) will do.
// The one outside call is the optional Advisor, asked at most once per
// iteration under a timeout, which may only reorder near-tied candidates
// that already passed every gate; without it, or when it fails, the plan is
// the same.
//
// The package also holds the pure helpers the Summarizer uses around a plan:
// the cache key of a compaction result (CacheKey, OpPayload), the realised
// ratio and cooldown bookkeeping (History), an extractive fallback for when
// the LLM is unavailable (Extract) and the check that a summary still names
// every modified file and unresolved error (MissingFacts, AppendMissingFacts).
package compaction
