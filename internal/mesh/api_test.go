package mesh_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
)

const (
	webToken = "web-token-0123456789abcdef"
	opsToken = "ops-token-0123456789abcdef"
)

// apiServer serves the console's API of h's mesh, with tokens for teams web
// and ops; the services named run on the mesh.
func apiServer(t testing.TB, h *harness, services ...string) (*httptest.Server, *mesh.Mesh) {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(webToken+": web\n"+opsToken+": ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.cfg.API.TokensFile = tokens
	m := h.mesh()
	if len(services) > 0 {
		h.run(m, services...)
	}
	handler, err := m.API()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv, m
}

// call makes an API call as token and decodes the JSON answer into out
// (when not nil); it returns the status.
func call(t *testing.T, srv *httptest.Server, token, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

type apiError struct {
	Error string `json:"error"`
}

// sse is a client of a session's event stream.
type sse struct {
	resp *http.Response
	r    *bufio.Reader
}

type message struct {
	id        uint64
	event     string
	data      string
	keepalive bool
}

func openSSE(t *testing.T, srv *httptest.Server, token, path, lastID string) (*sse, int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp, err := srv.Client().Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	return &sse{resp: resp, r: bufio.NewReader(resp.Body)}, resp.StatusCode
}

// next reads the next message (an event, or a keepalive comment).
func (s *sse) next(t *testing.T) message {
	t.Helper()
	var m message
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("event stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if m.event != "" || m.keepalive {
				return m
			}
		case line == ": keepalive":
			m.keepalive = true
		case strings.HasPrefix(line, "id: "):
			m.id, _ = strconv.ParseUint(strings.TrimPrefix(line, "id: "), 10, 64)
		case strings.HasPrefix(line, "event: "):
			m.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			m.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

// until reads events until one of type typ, checking each as it goes.
func (s *sse) until(t *testing.T, typ events.Type, seen *[]message) message {
	t.Helper()
	for {
		m := s.next(t)
		if m.keepalive {
			continue
		}
		var env events.Envelope
		if err := json.Unmarshal([]byte(m.data), &env); err != nil || string(env.Type) != m.event || m.id == 0 {
			t.Fatalf("message %+v: %v", m, err)
		}
		if n := len(*seen); n > 0 && (*seen)[n-1].id >= m.id {
			t.Fatalf("ids do not grow: %d then %d", (*seen)[n-1].id, m.id)
		}
		*seen = append(*seen, m)
		if env.Type == typ {
			return m
		}
	}
}

const escalatingScript = `
rules:
  - {model: builder, when: {any_contains: "use notes-v2.txt"}, times: 1, reply: {content: "Following the guidance.", tool_calls: [{name: write_file, arguments: {path: summary.txt, content: "buy bread\n"}}]}}
  - {model: builder, when: {any_contains: "use notes-v2.txt"}, reply: {content: "summary.txt summarises notes-v2.txt."}}
  - {model: builder, reply: {content: "Let me read the notes again.", tool_calls: [{name: read_file, arguments: {path: notes.txt}}]}}
  - {model: pruner, reply: {content: "notes.txt was read many times and is empty."}}
  - {model: decomposer, reply: {content: "Sure! First read the notes, then write the summary."}}
  - {model: critic, reply: {content: '{"approved": true}'}}
`

const escalatingPRD = "tasks:\n  - {id: E1, title: Summarise the notes, acceptance_criteria: [summary.txt summarises the notes]}\n"

// The HTTP API end to end: tokens and teams, every endpoint, bad input
// with the CLI's message, the event stream from the start, live and after
// a reconnection, cancel and resume.
func TestAPI(t *testing.T) {
	h := newHarness(t, parseScript(t, escalatingScript))
	h.cfg.Pruner.Model, h.cfg.Decomposer.Model = "pruner", "decomposer"
	srv, _ := apiServer(t, h, "builder", "critic", "stuckdetector", "pruner", "decomposer", "summarizer")

	// The document is there for anyone.
	var doc map[string]any
	if code := call(t, srv, "", http.MethodGet, "/api/v1/openapi.json", nil, &doc); code != 200 || doc["openapi"] != "3.0.3" {
		t.Fatalf("openapi.json: %d %v", code, doc["openapi"])
	}
	paths, _ := doc["paths"].(map[string]any)
	for _, p := range []string{"/sessions", "/sessions/{id}", "/sessions/{id}/events", "/sessions/{id}/resume", "/sessions/{id}/cancel"} {
		if paths[p] == nil {
			t.Errorf("openapi.json lacks %s", p)
		}
	}
	// Without a valid token, every call is 401.
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/sessions"}, {"POST", "/api/v1/sessions"}, {"GET", "/api/v1/sessions/x"}, {"GET", "/api/v1/sessions/x/events"},
		{"POST", "/api/v1/sessions/x/resume"}, {"POST", "/api/v1/sessions/x/cancel"},
	} {
		for _, token := range []string{"", "not-a-token-of-the-file", webToken + "x"} {
			var e apiError
			if code := call(t, srv, token, c.method, c.path, nil, &e); code != 401 || !strings.Contains(e.Error, "bearer token") {
				t.Errorf("%s %s with token %q: %d %q, want 401", c.method, c.path, token, code, e.Error)
			}
		}
	}

	// Bad input is 400 with the message the CLI prints.
	ws := workspace(t, map[string]string{"notes.txt": "", "notes-v2.txt": "buy bread\n"})
	for _, c := range []struct {
		body any
		want string
	}{
		{map[string]any{"prd": "tasks:\n  - {id: E1, title: t, acceptance_criteria: [c], verfy: x}\n", "workspace": ws},
			`prd: invalid PRD: line 2, column 50: task "E1": field verfy: unknown field`},
		{map[string]any{"prd": "tasks:\n  - {id: E1, title: t}\n", "workspace": ws}, `prd: invalid PRD: task "E1": field acceptance_criteria`},
		{map[string]any{"prd": `{"tasks": [}`, "workspace": ws}, "prd: invalid PRD: line 1"},
		{map[string]any{"prd": escalatingPRD, "format": "toml", "workspace": ws}, `format "toml"`},
		{map[string]any{"prd": escalatingPRD, "workspace": "relative/dir"}, "workspace relative/dir: must be an absolute path"},
		{map[string]any{"prd": escalatingPRD}, "workspace is required"},
		{map[string]any{"prd": escalatingPRD, "workspace": ws, "session": "bad id!"}, "session id"},
		{map[string]any{"workspace": ws}, "prd is required"},
		{map[string]any{"prd": escalatingPRD, "workspace": ws, "extra": 1}, "unknown field"},
		{"not an object", "request body"},
	} {
		var e apiError
		if code := call(t, srv, webToken, http.MethodPost, "/api/v1/sessions", c.body, &e); code != 400 || !strings.Contains(e.Error, c.want) {
			t.Errorf("POST %v: %d %q, want 400 with %q", c.body, code, e.Error, c.want)
		}
	}

	// Team web starts a session.
	var created sessionindex.Summary
	code := call(t, srv, webToken, http.MethodPost, "/api/v1/sessions", map[string]any{"prd": escalatingPRD, "workspace": ws, "session": "api-1"}, &created)
	if code != 201 || created.ID != "api-1" || created.Team != "web" || created.State != "running" {
		t.Fatalf("POST: %d %+v", code, created)
	}
	var e apiError
	if code := call(t, srv, webToken, http.MethodPost, "/api/v1/sessions", map[string]any{"prd": escalatingPRD, "workspace": ws, "session": "api-1"}, &e); code != 409 ||
		!strings.Contains(e.Error, "session api-1 already exists") {
		t.Errorf("the same id again: %d %q", code, e.Error)
	}
	// Team ops may not take the id either, nor see or touch the session.
	if code := call(t, srv, opsToken, http.MethodPost, "/api/v1/sessions", map[string]any{"prd": escalatingPRD, "workspace": ws, "session": "api-1"}, &e); code != 409 {
		t.Errorf("team ops takes web's id: %d", code)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{{"GET", "/api/v1/sessions/api-1", nil}, {"POST", "/api/v1/sessions/api-1/cancel", nil},
		{"POST", "/api/v1/sessions/api-1/resume", map[string]string{"message": "mine"}}, {"GET", "/api/v1/sessions/api-1/events", nil}} {
		if code := call(t, srv, opsToken, c.method, c.path, c.body, &e); code != 404 || !strings.Contains(e.Error, "no events of team ops") {
			t.Errorf("team ops %s %s: %d %q, want 404", c.method, c.path, code, e.Error)
		}
	}

	// Its events, from the start, until it pauses.
	stream, code := openSSE(t, srv, webToken, "/api/v1/sessions/api-1/events", "")
	if code != 200 {
		t.Fatalf("events: %d", code)
	}
	var seen []message
	if first := stream.until(t, events.SessionStarted, &seen); len(seen) != 1 || !strings.Contains(first.data, `"team":"web"`) {
		t.Fatalf("first event %+v", first)
	}
	stream.until(t, events.SessionEscalated, &seen)

	var list struct {
		Sessions []sessionindex.Summary `json:"sessions"`
	}
	waitFor(t, "the index to show the escalation", func() bool {
		call(t, srv, webToken, http.MethodGet, "/api/v1/sessions", nil, &list)
		return len(list.Sessions) == 1 && list.Sessions[0].State == "escalated"
	})
	if s := list.Sessions[0]; s.ID != "api-1" || s.CurrentTask != "E1" || s.Iterations < 3 || s.Tokens == 0 || !strings.Contains(s.Reason, "could not be decomposed") {
		t.Errorf("listed %+v", s)
	}
	if call(t, srv, opsToken, http.MethodGet, "/api/v1/sessions", nil, &list); len(list.Sessions) != 0 {
		t.Errorf("team ops lists %+v", list.Sessions)
	}
	var one sessionindex.Entry
	if code := call(t, srv, webToken, http.MethodGet, "/api/v1/sessions/api-1", nil, &one); code != 200 || one.Workspace != ws || len(one.Tasks) != 1 ||
		one.Tasks[0].ID != "E1" || one.Limits.MaxIterations == 0 || one.Usage["builder"].Calls < 3 || one.Usage["pruner"].Calls != 1 {
		t.Errorf("GET one: %d %+v", code, one)
	}

	// Cancel and resume; the stream open since the start delivers what
	// happens now, live.
	var after sessionindex.Summary
	if code := call(t, srv, webToken, http.MethodPost, "/api/v1/sessions/api-1/resume", map[string]string{"message": " "}, &e); code != 400 || !strings.Contains(e.Error, "--message is required") {
		t.Errorf("resume without guidance: %d %q", code, e.Error)
	}
	if code := call(t, srv, webToken, http.MethodPost, "/api/v1/sessions/api-1/cancel", map[string]string{"reason": "wrong notes"}, &after); code != 202 || after.ID != "api-1" {
		t.Fatalf("cancel: %d %+v", code, after)
	}
	stream.until(t, events.CancelRequested, &seen)
	cancelled := stream.until(t, events.SessionCancelled, &seen)
	if !strings.Contains(cancelled.data, "wrong notes") {
		t.Errorf("cancelled: %s", cancelled.data)
	}
	if code := call(t, srv, webToken, http.MethodPost, "/api/v1/sessions/api-1/cancel", nil, &e); code != 400 || !strings.Contains(e.Error, "already ended: session.cancelled") {
		t.Errorf("cancel again: %d %q", code, e.Error)
	}
	if code := call(t, srv, webToken, http.MethodPost, "/api/v1/sessions/api-1/resume", map[string]string{"message": "notes.txt is empty on purpose: use notes-v2.txt"}, &after); code != 202 {
		t.Fatalf("resume: %d", code)
	}
	stream.until(t, events.SessionResumed, &seen)
	stream.until(t, events.SessionCompleted, &seen)
	if data, err := os.ReadFile(filepath.Join(ws, "summary.txt")); err != nil || string(data) != "buy bread\n" {
		t.Errorf("summary.txt = %q, %v", data, err)
	}

	// A client that reconnects with Last-Event-ID gets what came after;
	// from_seq starts where it says.
	mid := seen[len(seen)/2]
	again, _ := openSSE(t, srv, webToken, "/api/v1/sessions/api-1/events", strconv.FormatUint(mid.id, 10))
	if m := again.next(t); m.id != seen[len(seen)/2+1].id {
		t.Errorf("after Last-Event-ID %d: %d, want %d", mid.id, m.id, seen[len(seen)/2+1].id)
	}
	from, _ := openSSE(t, srv, webToken, fmt.Sprintf("/api/v1/sessions/api-1/events?from_seq=%d", mid.id), "")
	if m := from.next(t); m.id != mid.id {
		t.Errorf("from_seq %d: %d", mid.id, m.id)
	}
	if code := call(t, srv, webToken, http.MethodGet, "/api/v1/sessions/api-1/events?from_seq=x", nil, &e); code != 400 {
		t.Errorf("from_seq=x: %d", code)
	}
	waitFor(t, "the index to show the completion", func() bool {
		call(t, srv, webToken, http.MethodGet, "/api/v1/sessions/api-1", nil, &one)
		return one.State == "completed"
	})
	if code := call(t, srv, webToken, http.MethodGet, "/api/v1/sessions/nope", nil, &e); code != 404 {
		t.Errorf("GET of no session: %d", code)
	}
	if code := call(t, srv, webToken, http.MethodGet, "/api/v1/nothing", nil, &e); code != 404 {
		t.Errorf("an unknown call: %d", code)
	}
}

// An idle event stream says it is alive.
func TestAPIKeepAlive(t *testing.T) {
	h := newHarness(t, parseScript(t, "rules: [{reply: {content: done}}]"))
	h.cfg.Console.KeepAlive = 20 * time.Millisecond
	srv, m := apiServer(t, h)
	h.start(m, "idle", parsePRD(t, "tasks: [{id: T1, title: t, acceptance_criteria: [c]}]"), t.TempDir())
	// Nobody runs the builder: the session's one event is all there is.
	if code := call(t, srv, webToken, http.MethodGet, "/api/v1/sessions/idle", nil, nil); code != 404 {
		t.Fatalf("a session of the default team is team web's: %d", code)
	}
	started := events.Must(events.SessionStarted, "idle-web", "", 0, time.Now(), events.SessionStartedData{
		PRD: parsePRD(t, "tasks: [{id: T1, title: t, acceptance_criteria: [c]}]"), Workspace: t.TempDir()}).For("web")
	if err := m.Bus.Publish(context.Background(), started); err != nil {
		t.Fatal(err)
	}
	var one sessionindex.Entry
	if code := call(t, srv, webToken, http.MethodGet, "/api/v1/sessions/idle-web", nil, &one); code != 200 || one.State != "running" || len(one.Tasks) != 1 {
		t.Fatalf("a session not yet indexed: %d %+v", code, one)
	}
	stream, _ := openSSE(t, srv, webToken, "/api/v1/sessions/idle-web/events", "")
	if m := stream.next(t); m.event != string(events.SessionStarted) {
		t.Fatalf("first %+v", m)
	}
	if m := stream.next(t); !m.keepalive {
		t.Fatalf("after the last event: %+v, want a keepalive", m)
	}
}
