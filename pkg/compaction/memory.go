package compaction

import (
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/units"
)

// MemoryUnitPrefix starts the id of the unit that carries the session's
// memory (pkg/memory) into a task's context: what earlier tasks learned,
// which the builder's shell puts among the task's first units.
const MemoryUnitPrefix = "memory-"

// MemoryUnitID is the id of the memory unit in task's context.
func MemoryUnitID(task string) string { return MemoryUnitPrefix + task }

// IsMemoryUnit reports whether u carries the session's memory. Such a unit
// is an instruction that no plan touches, wherever it stands: it is already
// a summary bounded by its own setting, it is what later tasks must not
// rediscover, and it sits in the stable head, whose bytes the provider's
// prompt cache keeps.
func IsMemoryUnit(u units.Unit) bool {
	return strings.HasPrefix(u.ID, MemoryUnitPrefix) && u.Kind == units.KindMessage && u.Role == openai.ChatMessageRoleUser
}
