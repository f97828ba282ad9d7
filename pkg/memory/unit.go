package memory

import (
	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/compaction"
	"github.com/ralphmesh/ralph/pkg/units"
)

// Header opens the memory unit. It says where the notes come from and that
// they may be stale, so that the model checks before it relies on one.
const Header = "What earlier tasks of this session learned (the session's memory; each note names the task that learned it, " +
	"and the workspace is the truth where they differ):"

// Unit is the unit task starts with that carries m: a user message of turn
// 0, after the task's own instructions, so that it belongs to the stable
// head that no compaction rewrites (compaction.StableHead), and under the
// id that puts it in the instruction lane wherever it is
// (compaction.IsMemoryUnit).
func Unit(task string, m Memory) units.Unit {
	return units.Unit{ID: compaction.MemoryUnitID(task), Role: openai.ChatMessageRoleUser, Kind: units.KindMessage,
		Content: Header + "\n" + m.Text}
}
