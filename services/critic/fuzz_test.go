package critic

import (
	"encoding/json"
	"testing"

	"github.com/ralphmesh/ralph/pkg/events"
)

// FuzzParseVerdict: any reply, prose, fences or garbage, never panics; an
// accepted verdict is usable (a rejection always says why) and parsing it
// again from its own JSON gives the same verdict.
func FuzzParseVerdict(f *testing.F) {
	for _, s := range []string{
		`{"approved": true, "feedback": "ok"}`,
		"```json\n{\"approved\": false, \"feedback\": \"add tests\", \"unmet_criteria\": [\"tests\"]}\n```",
		`Sure! {"approved": false, "unmet_criteria": ["a {brace} in text"]} done`,
		`{"approved": "yes"}`,
		`{"feedback": "no approved field"}`,
		`{"approved": false}`,
		`{{{{`,
		`"}{"`,
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		v, err := ParseVerdict(text)
		if err != nil {
			return
		}
		if !v.Approved && v.Feedback == "" && len(v.UnmetCriteria) == 0 {
			t.Fatalf("accepted a rejection that says nothing: %q", text)
		}
		again, err := ParseVerdict(verdictJSON(t, v))
		if err != nil {
			t.Fatalf("the accepted verdict does not parse back: %v", err)
		}
		if again.Approved != v.Approved || again.Feedback != v.Feedback || len(again.UnmetCriteria) != len(v.UnmetCriteria) {
			t.Fatalf("round trip changed the verdict: %+v then %+v", v, again)
		}
	})
}

func verdictJSON(t *testing.T, v events.Verdict) string {
	t.Helper()
	b, err := json.Marshal(struct {
		Approved      bool     `json:"approved"`
		Feedback      string   `json:"feedback"`
		UnmetCriteria []string `json:"unmet_criteria"`
	}{v.Approved, v.Feedback, v.UnmetCriteria})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
