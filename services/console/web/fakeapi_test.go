package web_test

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ralphmesh/ralph/internal/mesh"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/services/console/web"
)

// testPrices are the prices the console under test is configured with, so
// the page shows cost.
const testPrices = "builder=3/15,critic=0.8/4"

// consoleServer is the server under test: the web handler at / beside an
// API that serves the /api/v1 contract (docs/REFERENCE.md) for one team
// from the mesh's stream and store. It is the one function to swap for the
// console service's own server, which serves the same contract.
// consoleServer is the console's real HTTP API (internal/mesh API: the
// API of package console with this web page mounted) on m, with one token
// of the sessions' team (the default team: the tests publish
// session.started without one) and the test prices.
func consoleServer(t *testing.T, m *mesh.Mesh) (baseURL, token string) {
	t.Helper()
	token = "token-of-the-default-team"
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(file, []byte(token+": "+events.DefaultTeam+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m.Config.API.TokensFile = file
	m.Config.Console.Prices = testPrices
	h, err := m.API()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	// Event streams run until the browser goes; ending the server ends
	// them, so Close does not wait for them.
	ctx, cancel := context.WithCancel(context.Background())
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(cancel)
	return srv.URL, token
}

// fakeServer is consoleServer whose event streams end after every events
// (0: never), as a proxy with a timeout would end them.
func fakeServer(t *testing.T, m *mesh.Mesh, every int) (baseURL, token string, api *fakeAPI) {
	t.Helper()
	prices, err := web.ParsePrices(testPrices)
	if err != nil {
		t.Fatal(err)
	}
	api = &fakeAPI{m: m, team: events.DefaultTeam, token: "token-of-the-default-team", every: every}
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", api.routes())
	mux.Handle("/", web.Handler(web.WithPrices(prices)))
	srv := httptest.NewUnstartedServer(mux)
	// Event streams run until the browser goes; ending the server ends
	// them, so Close does not wait for them.
	ctx, cancel := context.WithCancel(context.Background())
	srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(cancel)
	return srv.URL, api.token, api
}

// streamsAsked is how many event streams the pages asked for.
func (a *fakeAPI) streamsAsked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.streams
}

// fakeAPI serves the API contract the pages read, from recorded events:
// GET /sessions, GET /sessions/{id} (the summary, limits, tasks, usage)
// and GET /sessions/{id}/events (server-sent events from the stream, with
// the stream sequence as id), each only with the team's Bearer token.
type fakeAPI struct {
	m     *mesh.Mesh
	team  string
	token string
	every int
	mu    sync.Mutex
	// streams counts the event streams asked for.
	streams int
}

func (a *fakeAPI) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/sessions", a.list)
	mux.HandleFunc("GET /api/v1/sessions/{id}", a.one)
	mux.HandleFunc("GET /api/v1/sessions/{id}/events", a.events)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(a.token)) != 1 {
			apiError(w, http.StatusUnauthorized, "missing or unknown token")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

type usage struct {
	Calls        int64 `json:"calls"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

type taskView struct {
	ID       string     `json:"id"`
	Title    string     `json:"title"`
	Status   string     `json:"status"`
	ParentID string     `json:"parent_id,omitempty"`
	Depth    int        `json:"depth"`
	Turns    int        `json:"turns"`
	Attempts int        `json:"attempts"`
	Subtasks []taskView `json:"subtasks,omitempty"`
}

type summary struct {
	ID          string    `json:"id"`
	Team        string    `json:"team"`
	State       string    `json:"state"`
	Reason      string    `json:"reason,omitempty"`
	CurrentTask string    `json:"current_task,omitempty"`
	Iterations  int       `json:"iterations"`
	Tokens      int64     `json:"tokens"`
	StartedAt   time.Time `json:"started_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

type detail struct {
	summary
	Workspace string           `json:"workspace"`
	Limits    map[string]int   `json:"limits"`
	Tasks     []taskView       `json:"tasks"`
	Usage     map[string]usage `json:"usage"`
}

// sessionIDs are the sessions with a session.started in the stream.
func (a *fakeAPI) sessionIDs(ctx context.Context) ([]string, error) {
	js, err := jetstream.New(a.m.Bus.Conn())
	if err != nil {
		return nil, err
	}
	prefix := a.m.Config.Prefix
	stream, err := js.Stream(ctx, events.StreamName(prefix))
	if err != nil {
		return nil, err
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+".s.*."+string(events.SessionStarted)))
	if err != nil {
		return nil, err
	}
	var ids []string
	for subject := range info.State.Subjects {
		ids = append(ids, strings.Split(subject, ".")[2])
	}
	return ids, nil
}

// detail folds the session's events, replayed from the stream, into its
// summary, as the session index would hold it.
func (a *fakeAPI) detail(ctx context.Context, id string) (detail, error) {
	d := detail{summary: summary{ID: id, Team: a.team}, Usage: map[string]usage{}}
	type node struct {
		view     taskView
		children []string
	}
	tasks := map[string]*node{}
	get := func(id string) *node {
		if tasks[id] == nil {
			tasks[id] = &node{view: taskView{ID: id, Status: "pending"}}
		}
		return tasks[id]
	}
	var roots []string
	err := a.m.Bus.Replay(ctx, id, func(env events.Envelope) error {
		d.UpdatedAt = env.Time
		switch env.Type {
		case events.SessionStarted:
			var p events.SessionStartedData
			if err := env.Decode(&p); err != nil {
				return err
			}
			d.State, d.StartedAt, d.Workspace = "running", env.Time, p.Workspace
			for _, t := range p.PRD.Tasks {
				tasks[t.ID] = &node{view: taskView{ID: t.ID, Title: t.Title, Status: "pending"}}
				roots = append(roots, t.ID)
			}
		case events.TaskStarted:
			var p events.TaskStartedData
			if err := env.Decode(&p); err != nil {
				return err
			}
			get(p.Task.ID).view.Status, d.CurrentTask = "active", p.Task.ID
		case events.IterationCompleted:
			var rec events.IterationRecord
			if err := env.Decode(&rec); err != nil {
				return err
			}
			d.Iterations++
			get(rec.TaskID).view.Turns++
		case events.TaskDecomposed:
			var p events.TaskDecomposedData
			if err := env.Decode(&p); err != nil {
				return err
			}
			parent := get(p.ParentID)
			parent.view.Status = "decomposed"
			for _, s := range p.Subtasks {
				tasks[s.ID] = &node{view: taskView{ID: s.ID, Title: s.Title, Status: "pending", ParentID: p.ParentID, Depth: parent.view.Depth + 1}}
				parent.children = append(parent.children, s.ID)
			}
		case events.TaskCompleted:
			var p events.TaskCompletedData
			if err := env.Decode(&p); err != nil {
				return err
			}
			get(p.TaskID).view.Status, get(p.TaskID).view.Attempts = "done", p.Attempts
		case events.SessionCompleted:
			d.State, d.CurrentTask = "completed", ""
		case events.SessionFailed, events.SessionEscalated:
			var p struct {
				Reason string `json:"reason"`
			}
			if err := env.Decode(&p); err != nil {
				return err
			}
			d.State, d.Reason = strings.TrimPrefix(string(env.Type), "session."), p.Reason
		case events.SessionResumed:
			d.State, d.Reason = "running", ""
		}
		return nil
	})
	if err != nil {
		return d, err
	}
	var build func(ids []string) []taskView
	build = func(ids []string) []taskView {
		var out []taskView
		for _, id := range ids {
			n := tasks[id]
			v := n.view
			v.Subtasks = build(n.children)
			out = append(out, v)
		}
		return out
	}
	d.Tasks = build(roots)
	raw, err := a.m.Store.Usage(ctx, id)
	if err != nil {
		return d, err
	}
	for k, v := range raw {
		role, counter, _ := strings.Cut(k, ":")
		u := d.Usage[role]
		switch counter {
		case "calls":
			u.Calls = v
		case "input":
			u.InputTokens = v
			d.Tokens += v
		case "output":
			u.OutputTokens = v
			d.Tokens += v
		}
		d.Usage[role] = u
	}
	cfg := a.m.Config
	d.Limits = map[string]int{
		"context_window": cfg.Builder.ContextWindow, "compact_at": cfg.CompactAt(),
		"max_iterations": cfg.Builder.MaxIterations, "max_turns_per_task": cfg.Builder.MaxTurnsPerTask,
		"max_total_tokens": cfg.Builder.MaxTotalTokens,
	}
	return d, nil
}

func (a *fakeAPI) list(w http.ResponseWriter, r *http.Request) {
	ids, err := a.sessionIDs(r.Context())
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := []summary{}
	for _, id := range ids {
		d, err := a.detail(r.Context(), id)
		if err != nil {
			apiError(w, http.StatusInternalServerError, err.Error())
			return
		}
		out = append(out, d.summary)
	}
	slices.SortFunc(out, func(x, y summary) int { return y.StartedAt.Compare(x.StartedAt) })
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"sessions": out})
}

func (a *fakeAPI) one(w http.ResponseWriter, r *http.Request) {
	d, err := a.detail(r.Context(), r.PathValue("id"))
	if errors.Is(err, bus.ErrNoSession) || errors.Is(err, events.ErrInvalid) {
		apiError(w, http.StatusNotFound, "no such session")
		return
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(d)
}

// events streams the session's events from the first one (or from_seq)
// on, live, each with its stream sequence as the message id.
func (a *fakeAPI) events(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	if err := events.ValidSession(id); err != nil {
		apiError(w, http.StatusNotFound, "no such session")
		return
	}
	if ok, err := a.m.Bus.SessionExists(ctx, id); err != nil || !ok {
		apiError(w, http.StatusNotFound, "no such session")
		return
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SessionFilter(a.m.Config.Prefix, "*", id)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if s := r.URL.Query().Get("from_seq"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("from_seq %q: want a stream sequence, 1 or more", s))
			return
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, n
	}
	js, err := jetstream.New(a.m.Bus.Conn())
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	cons, err := js.OrderedConsumer(ctx, events.StreamName(a.m.Config.Prefix), cfg)
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	it, err := cons.Messages()
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer it.Stop()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher := w.(http.Flusher)
	flusher.Flush()
	a.mu.Lock()
	a.streams++
	a.mu.Unlock()
	for sent := 0; a.every == 0 || sent < a.every; sent++ {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return
		}
		meta, err := msg.Metadata()
		if err != nil {
			return
		}
		env, err := events.Decode(msg.Data())
		if err != nil {
			continue
		}
		if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", meta.Sequence.Stream, env.Type, msg.Data()); err != nil {
			return
		}
		flusher.Flush()
	}
}
