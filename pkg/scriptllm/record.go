package scriptllm

import "slices"

// recordLocked appends a record for req and returns its index. Records are
// appended on arrival, so Requests() lists them in arrival order even when
// delayed answers finish out of order. s.mu must be held.
func (s *Server) recordLocked(req parsedRequest) int {
	s.records = append(s.records, Recorded{
		Model:               req.Model,
		Turn:                req.Turn,
		Messages:            req.Messages,
		RuleIndex:           -1,
		MaxCompletionTokens: req.MaxCompletionTokens,
	})
	return len(s.records) - 1
}

func (s *Server) setStatus(record, status int) {
	s.mu.Lock()
	s.records[record].Status = status
	s.mu.Unlock()
}

// Requests returns a copy of every chat-completions request received so
// far, in arrival order, including rejected and unmatched ones.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Recorded, len(s.records))
	for i, r := range s.records {
		r.Messages = slices.Clone(r.Messages)
		out[i] = r
	}
	return out
}

// Hits counts the requests matched by rules named name (rule names need not
// be unique; all rules with the name count). Unnamed rules are not counted,
// so Hits("") is 0.
func (s *Server) Hits(name string) int {
	if name == "" {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.records {
		if r.RuleIndex >= 0 && r.RuleName == name {
			n++
		}
	}
	return n
}
