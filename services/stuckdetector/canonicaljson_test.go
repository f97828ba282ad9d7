package stuckdetector

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// checkCanonical fails when isCanonicalObject accepts b but the long way
// gives something else: the one thing the shortcut must never do.
func checkCanonical(t *testing.T, b []byte) (fast bool) {
	t.Helper()
	if !isCanonicalObject(b) {
		return false
	}
	if slow := reencodeArgs(b); slow != string(b) {
		t.Errorf("isCanonicalObject(%q) = true, but re-encoding gives %q", b, slow)
	}
	return true
}

func TestIsCanonicalObject(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`{"path":"a.go"}`, true},
		{`{"a":1,"b":[true,false,null,-0.5e+3,{}],"c":{"d":"x\n\t\"\\y é <&>"}}`, true},
		{`{"a":[],"b":{}}`, true},
		{`{}`, false}, // canonicalArgs says ""
		{`{"b":1,"a":2}`, false},
		{`{"a":1,"a":2}`, false},
		{`{"a": 1}`, false},
		{`{"a":1 }`, false},
		{`{"a":"\u00e9"}`, false},
		{`{"a":"\/"}`, false},
		{`{"a":"\b"}`, false},
		{`{"\n":1}`, false},
		{"{\"a\":\"\x7f\"}", false},
		{"{\"a\":\"\xff\"}", false},
		{"{\"a\":\"\u2028\"}", false},
		{`{"a":01}`, false},
		{`{"a":1.}`, false},
		{`{"a":.5}`, false},
		{`{"a":1e}`, false},
		{`{"a":tru}`, false},
		{`{"a":1}{"b":2}`, false},
		{`{"a":1}x`, false},
		{`{"a":1`, false},
		{`"{\"a\":1}"`, false},
		{`[1]`, false},
		{`{"a":[1,]}`, false},
	} {
		if got := isCanonicalObject([]byte(tc.in)); got != tc.want {
			t.Errorf("isCanonicalObject(%s) = %v, want %v", tc.in, got, tc.want)
		}
		checkCanonical(t, []byte(tc.in))
	}
}

// TestCanonicalArgsShortcutOnCorpus holds the shortcut against the long way
// on every call of the corpus, and on random values as encoding/json writes
// them and as a careless hand writes them.
func TestCanonicalArgsShortcutOnCorpus(t *testing.T) {
	fast := 0
	for _, records := range corpusRecords(t) {
		for _, r := range records {
			for _, c := range r.ToolCalls {
				if checkCanonical(t, bytes.TrimSpace(c.Args)) {
					fast++
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(13, 1))
	for range 3000 {
		b := randomArgs(rng)
		if checkCanonical(t, b) {
			fast++
		}
		// Mangle a byte: most manglings make it non-canonical or invalid.
		m := bytes.Clone(b)
		m[rng.IntN(len(m))] = `{}[]":, \ae1-.0"`[rng.IntN(16)]
		checkCanonical(t, m)
	}
	if fast < 1000 {
		t.Fatalf("only %d args took the shortcut: the comparison compared little", fast)
	}
}

// randomArgs is a random object encoded the way builders encode args.
func randomArgs(rng *rand.Rand) []byte {
	var value func(depth int) any
	value = func(depth int) any {
		switch k := rng.IntN(8); {
		case k == 0 && depth < 3:
			m := map[string]any{}
			for range rng.IntN(4) {
				m[randomText(rng)] = value(depth + 1)
			}
			return m
		case k == 1 && depth < 3:
			a := []any{}
			for range rng.IntN(4) {
				a = append(a, value(depth+1))
			}
			return a
		case k == 2:
			return json.Number([]string{"0", "-1", "12.5", "1e9", "-0.25E-3"}[rng.IntN(5)])
		case k == 3:
			return rng.IntN(2) == 0
		case k == 4:
			return nil
		default:
			return randomText(rng)
		}
	}
	m := map[string]any{randomText(rng): value(0)}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(rng.IntN(2) == 0)
	if err := enc.Encode(m); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func randomText(rng *rand.Rand) string {
	const alphabet = "ab z<>&\"\\\n\t\r\x01\x7féü\u2028/"
	runes := []rune(alphabet)
	out := make([]rune, rng.IntN(6))
	for i := range out {
		out[i] = runes[rng.IntN(len(runes))]
	}
	return string(out)
}

func FuzzCanonicalArgsShortcut(f *testing.F) {
	for _, s := range []string{`{"path":"a.go"}`, `{"a":[1,{"b":null}],"c":"x\ny"}`, `{"b":1,"a":2}`, `{"a":"\u00e9"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkCanonical(t, b) })
}
