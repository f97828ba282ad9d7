package prd_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/prd"
)

// FuzzParse: parsing any bytes as YAML or JSON never panics; what it
// accepts is a valid PRD that survives a JSON round trip unchanged; what it
// refuses is ErrInvalid, and a position it gives lies inside the document.
func FuzzParse(f *testing.F) {
	f.Add([]byte("title: t\ntasks:\n  - id: T1\n    title: a\n    acceptance_criteria: [x]\n"), false)
	f.Add([]byte("title: t\ntasks:\n  - id: T1\n    title: a\n    acceptance_criteria: [x]\n  - id: T2\n    title: b\n    depends_on: [T1]\n    acceptance_criteria: [y]\n    verify: test -f x\n"), false)
	f.Add([]byte(`{"title":"t","tasks":[{"id":"T1","title":"a","acceptance_criteria":["x"]}]}`), true)
	f.Add([]byte(`{"title":"t","tasks":[{"id":"T1","title":"a","acceptance_criteria":["x"],"depends_on":["T1"]}]}`), true)
	f.Add([]byte("title: t\ntasks:\n  - id: T1\n   title: bad indent\n"), false)
	f.Add([]byte("- a\n- b\n"), false)
	f.Add([]byte(`{"title": 5}`), true)
	f.Add([]byte("\xff\xfe"), false)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		ext := ".yaml"
		if asJSON {
			ext = ".json"
		}
		p, err := prd.Parse(data, ext)
		if err != nil {
			if !errors.Is(err, prd.ErrInvalid) {
				t.Fatalf("refusal is not ErrInvalid: %v", err)
			}
			var de *prd.DecodeError
			if errors.As(err, &de) && de.Line > 0 {
				if lines := strings.Count(string(data), "\n") + 1; de.Line > lines {
					t.Fatalf("error at line %d of a %d-line document: %v", de.Line, lines, err)
				}
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse accepted a PRD Validate refuses: %v", err)
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("marshal accepted PRD: %v", err)
		}
		again, err := prd.Parse(b, ".json")
		if err != nil {
			t.Fatalf("the accepted PRD does not parse back from its JSON %s: %v", b, err)
		}
		b2, _ := json.Marshal(again)
		if string(b) != string(b2) {
			t.Fatalf("round trip changed the PRD:\n%s\n%s", b, b2)
		}
	})
}
