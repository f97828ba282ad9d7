package teams_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/teams"
)

const (
	tokenA = "aaaaaaaaaaaaaaaaaaaa-web"
	tokenB = "bbbbbbbbbbbbbbbbbbbb-ops"
)

func TestTokens(t *testing.T) {
	tok, err := teams.ParseTokens([]byte("# who may use the API\n" + tokenA + ": web\n\"" + tokenB + "\": ops\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Len() != 2 {
		t.Fatalf("%d tokens, want 2", tok.Len())
	}
	for token, want := range map[string]string{tokenA: "web", tokenB: "ops"} {
		if team, ok := tok.Team(token); !ok || team != want {
			t.Errorf("Team(%s) = %q %v, want %q", token, team, ok, want)
		}
	}
	for _, bad := range []string{"", tokenA[:len(tokenA)-1], tokenA + "x", strings.ToUpper(tokenA), "web"} {
		if team, ok := tok.Team(bad); ok {
			t.Errorf("Team(%q) = %q: a token that is none was accepted", bad, team)
		}
	}
	empty, err := teams.ParseTokens(nil)
	if err != nil || empty.Len() != 0 {
		t.Errorf("an empty file: %d tokens, %v", empty.Len(), err)
	}
	if _, ok := empty.Team(tokenA); ok {
		t.Error("no tokens accepted a token")
	}
}

// A bad tokens file is refused with the line and the reason, and the error
// never quotes a token.
func TestTokensFileErrors(t *testing.T) {
	cases := map[string]string{
		"short":      "tooshort: web\n",
		"bad team":   tokenA + ": \"we b\"\n",
		"twice":      tokenA + ": web\n" + tokenA + ": ops\n",
		"not a map":  "- " + tokenA + "\n",
		"nested":     tokenA + ":\n  team: web\n",
		"not yaml":   tokenA + ": [web\n",
		"empty team": tokenA + ":\n",
	}
	for name, content := range cases {
		_, err := teams.ParseTokens([]byte(content))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "aaaaaaaaaaaaaaaa") || strings.Contains(err.Error(), "tooshort") {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
		if name != "not yaml" && !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: the error names no line: %v", name, err)
		}
	}
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(cases["short"]), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := teams.LoadTokens(path); !errors.Is(err, teams.ErrTokensFile) || !strings.Contains(err.Error(), path) {
		t.Errorf("LoadTokens: %v, want ErrTokensFile naming the file", err)
	}
	if _, err := teams.LoadTokens(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, teams.ErrTokensFile) {
		t.Errorf("a missing file: %v", err)
	}
}

func TestLimits(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(file, []byte("web:\n  max_sessions: 2\nops:\n  max_tokens_per_day: 1000\n  max_sessions: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := teams.Config{MaxSessions: 5, MaxTokensPerDay: 50_000, LimitsFile: file}.Limits()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]teams.Limit{
		"web":     {MaxSessions: 2, MaxTokensPerDay: 50_000},
		"ops":     {MaxSessions: 0, MaxTokensPerDay: 1000},
		"default": {MaxSessions: 5, MaxTokensPerDay: 50_000},
	}
	for team, want := range cases {
		if got := l.For(team); got != want {
			t.Errorf("For(%s) = %+v, want %+v", team, got, want)
		}
	}
	if !l.Any() {
		t.Error("limits set, Any false")
	}
	none, err := teams.DefaultConfig().Limits()
	if err != nil || none.Any() {
		t.Errorf("the defaults limit something: %+v %v", none, err)
	}
	for name, content := range map[string]string{
		"unknown field": "web:\n  max_session: 2\n",
		"negative":      "web:\n  max_sessions: -1\n",
		"bad team":      "\"a.b\":\n  max_sessions: 1\n",
		"not a map":     "- web\n",
	} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := (teams.Config{LimitsFile: file}).Limits(); err == nil || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: %v, want an error naming the file", name, err)
		}
	}
	if err := (teams.Config{MaxSessions: -1}).Validate(); err == nil {
		t.Error("a negative limit validates")
	}
}

func TestReasons(t *testing.T) {
	lim := teams.Limit{MaxSessions: 2, MaxTokensPerDay: 1000}
	cases := []struct {
		running int
		spent   int64
		want    string
	}{
		{0, 0, ""},
		{1, 999, ""},
		{2, 0, "team web has 2 sessions running, its limit"},
		{0, 1000, "team web spent 1000 of its 1000 tokens for 2026-03-04 (UTC"},
		{3, 5000, "sessions running"},
	}
	for _, c := range cases {
		got := lim.AdmitReason("web", c.running, c.spent, "20260304")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("AdmitReason(%d, %d) = %q, want %q", c.running, c.spent, got, c.want)
		}
	}
	if got := (teams.Limit{}).AdmitReason("web", 1000, 1<<40, "20260304"); got != "" {
		t.Errorf("no limit refused: %s", got)
	}
}

// fakes for the guard: a counter and an index in memory.
type counter struct {
	steps map[string]int
	total int64
}

func (c *counter) AddTeamTokens(_ context.Context, team, day, session string, step, tokens int) (int64, error) {
	key := fmt.Sprintf("%s/%s/%s/%d", team, day, session, step)
	if _, ok := c.steps[key]; !ok {
		c.steps[key] = tokens
		c.total += int64(tokens)
	}
	return c.total, nil
}
func (c *counter) TeamTokens(context.Context, string, string) (int64, error) { return c.total, nil }

type sessions struct {
	running int
	day     int64
}

func (s *sessions) Running(context.Context, string) (int, error) { return s.running, nil }
func (s *sessions) TeamTokens(context.Context, string, string) (int64, error) {
	return s.day, nil
}
func (s *sessions) SetTeamTokens(_ context.Context, _, _ string, total int64) error {
	s.day = max(s.day, total)
	return nil
}

func TestGuard(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 4, 23, 0, 0, 0, time.UTC)
	c, s := &counter{steps: map[string]int{}}, &sessions{running: 1}
	g := teams.Guard{Limits: teams.Limits{Default: teams.Limit{MaxSessions: 2, MaxTokensPerDay: 100}}, Counter: c, Sessions: s}
	if why, err := g.Admit(ctx, "web", "s1", now); err != nil || why != "" {
		t.Fatalf("Admit with room: %q %v", why, err)
	}
	// A step delivered twice is counted once.
	for range 2 {
		if err := g.Spend(ctx, "web", "s1", 3, 60, now); err != nil {
			t.Fatal(err)
		}
	}
	if c.total != 60 || s.day != 60 {
		t.Fatalf("after one step of 60 tokens: counter %d, index %d", c.total, s.day)
	}
	if why, _ := g.Exhausted(ctx, "web", now); why != "" {
		t.Fatalf("exhausted at 60 of 100: %s", why)
	}
	if err := g.Spend(ctx, "web", "s1", 4, 50, now); err != nil {
		t.Fatal(err)
	}
	if why, _ := g.Exhausted(ctx, "web", now); !strings.Contains(why, "spent 110 of its 100 tokens for 2026-03-04") {
		t.Errorf("Exhausted past the budget: %q", why)
	}
	if why, _ := g.Admit(ctx, "web", "s2", now); !strings.Contains(why, "spent 110") {
		t.Errorf("Admit past the budget: %q", why)
	}
	s.running, c.total = 2, 0
	if why, _ := g.Admit(ctx, "web", "s2", now); !strings.Contains(why, "2 sessions running") {
		t.Errorf("Admit at the session limit: %q", why)
	}
	// A team without limits costs nothing: nothing is counted.
	free := teams.Guard{Limits: teams.Limits{Overrides: map[string]teams.Limit{"ops": {MaxSessions: 1}}}, Counter: c, Sessions: s}
	before := len(c.steps)
	if err := free.Spend(ctx, "web", "s9", 1, 500, now); err != nil || len(c.steps) != before {
		t.Errorf("a team without a token limit was counted: %v", err)
	}
	if why, _ := free.Admit(ctx, "web", "s9", now); why != "" {
		t.Errorf("a team without limits refused: %s", why)
	}
}
