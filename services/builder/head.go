package builder

import "github.com/ralphmesh/ralph/pkg/store"

// SessionHead is what the other services read on every request
// (store.Head), stored with the state.
func (s State) SessionHead() store.Head {
	h := store.Head{Session: s.Session, Workspace: s.Workspace, Limits: s.Limits, Phase: string(s.Phase), Step: s.Step,
		Signal: s.Signal, TaskIDs: make([]string, len(s.Tasks))}
	for i, t := range s.Tasks {
		h.TaskIDs[i] = t.ID
	}
	if t := s.CurrentTask(); t != nil {
		h.Task = &store.TaskView{Task: t.Task, Status: t.Status, Turns: t.Turns, Attempts: t.Attempts,
			Interventions: t.Interventions, FilesChanged: t.FilesChanged, Summary: t.Summary, Depth: t.Depth,
			Subtasks: t.Subtasks, Base: t.Base}
	}
	return h
}
