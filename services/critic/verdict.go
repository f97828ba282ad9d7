package critic

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ralphmesh/ralph/pkg/events"
)

// ParseVerdict reads the critic model's reply. It accepts the JSON object
// alone, inside a ```json fence, or surrounded by prose, and requires the
// "approved" field so that a reply about something else is not taken as a
// rejection.
func ParseVerdict(text string) (events.Verdict, error) {
	obj := extractObject(text)
	if obj == "" {
		return events.Verdict{}, errors.New("no JSON object in the reply")
	}
	var raw struct {
		Approved      *bool    `json:"approved"`
		Feedback      string   `json:"feedback"`
		UnmetCriteria []string `json:"unmet_criteria"`
	}
	if err := json.Unmarshal([]byte(obj), &raw); err != nil {
		return events.Verdict{}, fmt.Errorf("reply is not a valid verdict object: %v", err)
	}
	if raw.Approved == nil {
		return events.Verdict{}, errors.New(`field "approved" (true or false) is missing`)
	}
	v := events.Verdict{Approved: *raw.Approved, Feedback: strings.TrimSpace(raw.Feedback), UnmetCriteria: raw.UnmetCriteria}
	if !v.Approved && v.Feedback == "" && len(v.UnmetCriteria) == 0 {
		return events.Verdict{}, errors.New(`a rejection needs "feedback" or "unmet_criteria"`)
	}
	return v, nil
}

// extractObject returns the first balanced {...} in text, honouring strings
// so braces inside feedback text do not end it early.
func extractObject(text string) string {
	start := strings.Index(text, "{")
	if start < 0 {
		return ""
	}
	depth, inString, escaped := 0, false, false
	for i := start; i < len(text); i++ {
		c := text[i]
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return text[start : i+1]
			}
		}
	}
	return ""
}
