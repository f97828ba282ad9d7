package mesh_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
)

// A team's limits hold when a session starts (the API refuses it with 429
// and the reason; the builder fails a start that got past it) and while it
// runs (a session that spends the team's tokens of the day fails with the
// reason).
func TestTeamLimits(t *testing.T) {
	h := newHarness(t, parseScript(t, `
rules:
  - {model: builder, when: {first_user_contains: "Waits for review"}, reply: {content: "Done."}}
  - {model: builder, reply: {content: "Reading.", tool_calls: [{name: list_dir, arguments: {path: "."}}]}}
`))
	limits := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(limits, []byte("web: {max_sessions: 1}\nops: {max_tokens_per_day: 500}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.cfg.Teams.LimitsFile = limits
	// No critic: a session that asks for a review waits, running.
	srv, m := apiServer(t, h, "builder", "stuckdetector")
	ws := t.TempDir()
	post := func(token, session, title string) (int, string) {
		var e apiError
		code := call(t, srv, token, http.MethodPost, "/api/v1/sessions", map[string]any{"session": session, "workspace": ws,
			"prd": "tasks:\n  - {id: T1, title: " + title + ", acceptance_criteria: [c]}\n"}, &e)
		return code, e.Error
	}
	if code, msg := post(webToken, "web-1", "Waits for review"); code != 201 {
		t.Fatalf("team web's first session: %d %s", code, msg)
	}
	waitFor(t, "web-1 to wait for its review", func() bool {
		e, err := m.Index.Get(context.Background(), "web", "web-1")
		return err == nil && e.Phase == "reviewing" && e.State == sessionindex.StateRunning
	})
	code, msg := post(webToken, "web-2", "Waits for review")
	if code != 429 || !strings.Contains(msg, "team web has 1 sessions running, its limit") {
		t.Fatalf("team web's second session: %d %q, want 429 and the reason", code, msg)
	}
	// A start that does not ask first (any client that may publish one)
	// is refused by the builder, with the same reason.
	sneaky := events.Must(events.SessionStarted, "web-3", "", 0, time.Now(), events.SessionStartedData{
		PRD: parsePRD(t, "tasks: [{id: T1, title: t, acceptance_criteria: [c]}]"), Workspace: ws}).For("web")
	if err := m.Bus.Publish(context.Background(), sneaky); err != nil {
		t.Fatal(err)
	}
	waitIndexed(t, m, "web", "web-3", sessionindex.StateFailed)
	if e, _ := m.Index.Get(context.Background(), "web", "web-3"); !strings.Contains(e.Reason, "team web has 1 sessions running") {
		t.Errorf("the builder's refusal: %q", e.Reason)
	}

	// Team ops may spend 500 tokens a day: its session fails once it
	// has, with the reason, and the next is refused.
	if code, msg := post(opsToken, "ops-1", "Keeps reading"); code != 201 {
		t.Fatalf("team ops's session: %d %s", code, msg)
	}
	waitIndexed(t, m, "ops", "ops-1", sessionindex.StateFailed)
	e, _ := m.Index.Get(context.Background(), "ops", "ops-1")
	day := time.Now().UTC().Format("2006-01-02")
	if !strings.Contains(e.Reason, "team ops spent") || !strings.Contains(e.Reason, "of its 500 tokens for "+day) || e.Iterations < 1 || e.Tokens < 500 {
		t.Errorf("ops-1 failed with %q after %d iterations, %d tokens", e.Reason, e.Iterations, e.Tokens)
	}
	code, msg = post(opsToken, "ops-2", "Keeps reading")
	if code != 429 || !strings.Contains(msg, "team ops spent") {
		t.Errorf("team ops's next session: %d %q, want 429", code, msg)
	}
}
