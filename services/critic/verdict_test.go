package critic

import "testing"

func TestParseVerdict(t *testing.T) {
	cases := []struct {
		name     string
		in       string
		approved bool
		feedback string
		wantErr  bool
	}{
		{"plain approve", `{"approved": true, "feedback": "looks good"}`, true, "looks good", false},
		{"fenced reject", "Here you go:\n```json\n{\"approved\": false, \"feedback\": \"add {braces} test\", \"unmet_criteria\": [\"c1\"]}\n```", false, "add {braces} test", false},
		{"prose around", `I think {"approved":true} is right.`, true, "", false},
		{"missing approved", `{"feedback": "x"}`, false, "", true},
		{"not json", `LGTM!`, false, "", true},
		{"broken json", `{"approved": tru}`, false, "", true},
		{"reject without reason", `{"approved": false}`, false, "", true},
		{"escaped quote", `{"approved": false, "feedback": "say \"hi}\""}`, false, `say "hi}"`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := ParseVerdict(c.in)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, c.wantErr)
			}
			if err == nil && (v.Approved != c.approved || v.Feedback != c.feedback) {
				t.Fatalf("got %+v", v)
			}
		})
	}
}
