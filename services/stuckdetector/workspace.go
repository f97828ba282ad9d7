package stuckdetector

// This file is how the patterns tell, from the records alone, when the
// workspace changed.

import "github.com/ralphmesh/ralph/pkg/events"

// workspaceChanges reports for each record whether the workspace changed
// during it: it listed changed files, or its hash differs from the last hash
// reported before it. A change seen only by hash is attributed to the record
// that revealed it; for a newest-first walk that is the cautious choice.
func workspaceChanges(window []events.IterationRecord) []bool {
	changed := make([]bool, len(window))
	prev := ""
	for i, r := range window {
		changed[i] = len(r.FilesChanged) > 0
		if r.WorkspaceHash != "" {
			if prev != "" && r.WorkspaceHash != prev {
				changed[i] = true
			}
			prev = r.WorkspaceHash
		}
	}
	return changed
}

// unchangedStretch is the trailing run of records in which the workspace did
// not change, or nil when the newest record changed it. A change in the
// newest iteration may have come after its calls, so the model acted on
// what it saw: not a loop. The same caution excludes any iteration that
// changed something from the stretch.
func unchangedStretch(window []events.IterationRecord) []events.IterationRecord {
	if len(window) == 0 {
		return nil
	}
	changed := workspaceChanges(window)
	last := len(window) - 1
	if changed[last] {
		return nil
	}
	start := last
	for start > 0 && !changed[start-1] {
		start--
	}
	return window[start:]
}
