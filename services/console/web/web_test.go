package web

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/ralphmesh/ralph/pkg/settings"
)

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

func TestHandlerServesThePages(t *testing.T) {
	h := Handler()
	cases := []struct {
		path, contentType, contains string
	}{
		{"/", "text/html", `<script type="module" src="assets/list.js">`},
		{"/sessions/s-42", "text/html", `<script type="module" src="../assets/session.js">`},
		{"/assets/app.css", "text/css", "--window"},
		{"/assets/session.js", "text/javascript", "streamEvents"},
		{"/assets/chart.js", "text/javascript", `"data-kind"`},
		{"/assets/favicon.svg", "image/svg+xml", "<svg"},
		{"/console.json", "application/json", `"api":"/api/v1"`},
	}
	for _, c := range cases {
		res, body := get(t, h, c.path)
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", c.path, res.StatusCode, body)
			continue
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, c.contentType) {
			t.Errorf("GET %s: Content-Type %q, want %s", c.path, ct, c.contentType)
		}
		if !strings.Contains(body, c.contains) {
			t.Errorf("GET %s: body lacks %q", c.path, c.contains)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", c.path, csp)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", c.path)
		}
	}
}

func TestHandlerRefusesWhatIsNoPage(t *testing.T) {
	h := Handler()
	for _, path := range []string{"/sessions/bad%20id", "/sessions/" + strings.Repeat("x", 65), "/nothing", "/assets/none.js", "/sessions/"} {
		if res, _ := get(t, h, path); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, res.StatusCode)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader("x")))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", rec.Code)
	}
}

// The pages fetch nothing from anywhere else: every src, href and import
// in the assets is relative to the handler, and every fetch goes to the
// page's own origin.
func TestAssetsReferToNothingOutside(t *testing.T) {
	outside := regexp.MustCompile(`(?i)(src|href)\s*=\s*["'](https?:)?//|import[^;]*from\s*["'](https?:)?//|fetch\(\s*["'](https?:)?//|url\(\s*["']?(https?:)?//`)
	for _, bad := range []string{`<script src="https://cdn.example/x.js">`, `import { a } from "//cdn.example/a.js";`, `fetch("http://api.example/")`, `url(https://fonts.example/f.woff)`} {
		if !outside.MatchString(bad) {
			t.Fatalf("the check misses %s", bad)
		}
	}
	err := fs.WalkDir(assets, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(assets, path)
		if err != nil {
			return err
		}
		if m := outside.Find(data); m != nil {
			t.Errorf("%s refers outside the console: %s", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConsoleSettings(t *testing.T) {
	p, err := ParsePrices("builder=3/15, critic=0.8/4")
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, Handler(WithPrices(p), WithAPI("/ralph/api/v1")), "/console.json")
	var got struct {
		API    string `json:"api"`
		Prices Prices `json:"prices"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if got.API != "/ralph/api/v1" || got.Prices["builder"] != (Price{3, 15}) || got.Prices["critic"] != (Price{0.8, 4}) || len(got.Prices) != 2 {
		t.Fatalf("console.json %s", body)
	}
}

func TestParsePrices(t *testing.T) {
	ok := []struct {
		in   string
		want Prices
	}{
		{"", Prices{}},
		{"  ", Prices{}},
		{"builder=3/15", Prices{"builder": {3, 15}}},
		{"builder = 3 / 15 ,critic=0/0.5", Prices{"builder": {3, 15}, "critic": {0, 0.5}}},
	}
	for _, c := range ok {
		got, err := ParsePrices(c.in)
		if err != nil {
			t.Errorf("ParsePrices(%q): %v", c.in, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("ParsePrices(%q) = %v, want %v", c.in, got, c.want)
		}
		for role, p := range c.want {
			if got[role] != p {
				t.Errorf("ParsePrices(%q)[%s] = %v, want %v", c.in, role, got[role], p)
			}
		}
	}
	bad := []struct{ in, says string }{
		{"builder", "want ROLE=INPUT/OUTPUT"},
		{"=3/15", "want ROLE=INPUT/OUTPUT"},
		{"builder=3", "price of builder \"3\": want INPUT/OUTPUT"},
		{"builder=x/15", "input price of builder: \"x\" is not a price"},
		{"builder=3/-1", "output price of builder: \"-1\" is not a price"},
		{"builder=3/NaN", "output price of builder: \"NaN\" is not a price"},
		{"builder=1/2,builder=3/4", "price of builder: given twice"},
	}
	for _, c := range bad {
		_, err := ParsePrices(c.in)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParsePrices(%q) = %v, want an error saying %q", c.in, err, c.says)
		}
	}
}

func TestConfig(t *testing.T) {
	if err := (Config{Prices: "builder=3/15"}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := Config{Prices: "builder=3"}.Validate()
	var invalid *settings.Invalid
	if !errors.As(err, &invalid) || invalid.Field != "Prices" || !strings.Contains(err.Error(), "want INPUT/OUTPUT") {
		t.Fatalf("Validate: %v, want an invalid Prices field saying what is wrong", err)
	}
	opts, err := Config{Prices: "critic=1/2"}.Options()
	if err != nil {
		t.Fatal(err)
	}
	_, body := get(t, Handler(opts...), "/console.json")
	if !strings.Contains(body, `"critic":{"input":1,"output":2}`) {
		t.Fatalf("console.json with the configured prices: %s", body)
	}
	if _, err := (Config{Prices: "critic"}).Options(); err == nil {
		t.Fatal("Options accepted prices that cannot be read")
	}
}
