package compactbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ralphmesh/ralph/pkg/scriptllm"
	"github.com/ralphmesh/ralph/pkg/tools"
)

// SummarizerModel is the model name the scripted summarizer answers to.
const SummarizerModel = "summarizer-sim"

// Replies of the scripted summarizer. They are what a small model would
// plausibly write for each kind of request, and deliberately generic: the
// script sees neither paths nor error messages, so any fact that survives a
// compaction survives because the planner kept its unit raw or the executor
// put it back (its ground-truth check of checkpoints), never because the
// script repeated it.
const (
	checkpointReply = `## Key Decisions
- Profiles follow the house format from the brief: a heading, four header lines, three short paragraphs and a pull quote.
- Each profile is drafted right after its speaker's sources are read, and the checks are run every few profiles.
- The overview is written last, from the profiles, following the outline written at the start.

## Errors & Solutions
- A check reported a problem in a profile; it was fixed by editing the profile and running the check again.

## Modified Files
- Speaker profiles and notes in the workspace.

## Critical Context
- The sources stay unchanged in the workspace and can be read again when a detail is needed.
- The speakers' own words are quoted where possible; no fact or number is invented.`

	readDigest    = "A source file about one speaker: background, current role, the project they are known for with its results, what went wrong, the talk and a quote. The file is unchanged in the workspace."
	writeDigest   = "Wrote a speaker profile in the house format: heading, header lines, three paragraphs and a pull quote."
	editDigest    = "Replaced one passage of the file with a revised version."
	runDigest     = "Ran one of the workspace's check scripts and got its report."
	messageDigest = "The agent said what it would do next."
	otherDigest   = "Tool output condensed; the workspace holds the details."
)

// summarizerScript is the scripted summarizer. Rules match on what the
// executor's prompts say about the request (services/summarizer:
// DefaultSummaryPrompt, CompactPrompt and the op label in CompactRequest).
func summarizerScript() scriptllm.Script {
	reply := func(name string, when scriptllm.Match, content string) scriptllm.Rule {
		return scriptllm.Rule{Name: name, Model: SummarizerModel, When: when, Reply: &scriptllm.Reply{Content: content}}
	}
	compact := func(label string) scriptllm.Match {
		return scriptllm.Match{SystemContains: "You compact one item", LastContains: "(" + label}
	}
	return scriptllm.Script{Rules: []scriptllm.Rule{
		reply("checkpoint", scriptllm.Match{SystemContains: "Summarise the earlier work"}, checkpointReply),
		reply("digest-read", compact("compact_tool_output:"+tools.ReadFile), readDigest),
		reply("digest-write", compact("compact_tool_args:"+tools.WriteFile), writeDigest),
		reply("digest-edit", compact("compact_tool_args:"+tools.EditFile), editDigest),
		reply("digest-run", compact("compact_tool_output:"+tools.Run), runDigest),
		reply("digest-message", compact("compact_historical:"), messageDigest),
		reply("digest-other", scriptllm.Match{SystemContains: "You compact one item"}, otherDigest),
		// Anything else (the advisor is off) gets a plain answer rather
		// than a 422, so that a surprise shows in the counts, not as an
		// extractive fallback.
		reply("other", scriptllm.Match{}, otherDigest),
	}}
}

// memoryStore is the summarizer's cache and artifact store, in memory:
// the Executor's Cache and Artifacts.
type memoryStore struct {
	mu        sync.Mutex
	cache     map[string]string
	artifacts map[string]string
}

func newMemoryStore() *memoryStore {
	return &memoryStore{cache: map[string]string{}, artifacts: map[string]string{}}
}

func (m *memoryStore) CachedCompaction(_ context.Context, key string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.cache[key]
	return v, ok, nil
}

// CacheCompaction keeps every result: a benchmark session is shorter than
// any TTL.
func (m *memoryStore) CacheCompaction(_ context.Context, key, result string, _ time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cache[key] = result
	return nil
}

func (m *memoryStore) PutArtifact(_ context.Context, session, content string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := fmt.Sprintf("art-%d", len(m.artifacts)+1)
	m.artifacts[id] = content
	return id, nil
}
