package console

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/internal/control"
	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/sessionindex"
	"github.com/ralphmesh/ralph/pkg/teams"
)

// The console's HTTP API (docs/REFERENCE.md, "HTTP API"; openapi.json):
// every call under /api/v1 carries a bearer token, which names the team
// the call acts for; a team sees and touches only its own sessions (another
// team's is 404, as one that does not exist). Bad input is 400 with the
// message the CLI prints.

//go:embed openapi.json
var openAPI []byte

// Sessions is what the API does to sessions (control.Control).
type Sessions interface {
	Start(ctx context.Context, start events.Envelope) error
	Resume(ctx context.Context, team, session, message string) (events.Envelope, error)
	Cancel(ctx context.Context, team, session, reason string) (events.Envelope, error)
	Get(ctx context.Context, team, session string) (sessionindex.Entry, error)
	List(ctx context.Context, team string) ([]sessionindex.Entry, error)
}

// StartRequest is the body of POST /api/v1/sessions.
type StartRequest struct {
	PRD       string `json:"prd"`
	Format    string `json:"format,omitempty"`
	Workspace string `json:"workspace"`
	Session   string `json:"session,omitempty"`
}

// Teams is the bus of one team (bus.Bus.ForTeam), which the event stream
// follows.
type Teams interface {
	ForTeam(team string) (*bus.Bus, error)
}

// APIDeps are the API's collaborators.
type APIDeps struct {
	Sessions Sessions
	// Prepare turns a start request of team into its session.started
	// (the PRD read and bounded, the workspace checked, the tasks fitted
	// to the model's window: control.Prepare), or refuses it.
	Prepare func(team string, r StartRequest) (events.Envelope, error)
	Bus     Teams
	Tokens  teams.Tokens
	// KeepAlive is how often an idle event stream sends a comment.
	KeepAlive time.Duration
	// MaxBody bounds a request's body.
	MaxBody int64
	// Web, when set, serves the web page at / and /sessions/{id}.
	Web http.Handler
	Log *zap.Logger
}

// NewAPI is the API's handler.
func NewAPI(d APIDeps) http.Handler {
	if d.KeepAlive <= 0 {
		d.KeepAlive = DefaultConfig().KeepAlive
	}
	if d.MaxBody <= 0 {
		d.MaxBody = 1 << 20
	}
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	a := &api{d: d}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
	})
	mux.Handle("POST /api/v1/sessions", a.auth(a.start))
	mux.Handle("GET /api/v1/sessions", a.auth(a.list))
	mux.Handle("GET /api/v1/sessions/{id}", a.auth(a.get))
	mux.Handle("GET /api/v1/sessions/{id}/events", a.auth(a.events))
	mux.Handle("POST /api/v1/sessions/{id}/resume", a.auth(a.resume))
	mux.Handle("POST /api/v1/sessions/{id}/cancel", a.auth(a.cancel))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, http.StatusNotFound, fmt.Errorf("no such API call: %s %s", r.Method, r.URL.Path))
	})
	if d.Web != nil {
		mux.Handle("/", d.Web)
	}
	return mux
}

type api struct{ d APIDeps }

// auth admits a call with a bearer token of the tokens file and hands the
// handler the token's team. The token is never logged.
func (a *api) auth(h func(w http.ResponseWriter, r *http.Request, team string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		team, known := a.d.Tokens.Team(strings.TrimSpace(token))
		if !ok || !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ralph"`)
			why := "a valid bearer token is required (Authorization: Bearer TOKEN)"
			if a.d.Tokens.Len() == 0 {
				why = "no API tokens are configured (RALPH_API_TOKENS_FILE)"
			}
			a.fail(w, r, http.StatusUnauthorized, errors.New(why))
			return
		}
		h(w, r, team)
	})
}

// fail answers {"error": msg} with status.
func (a *api) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status >= 500 {
		a.d.Log.Error("API call failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
	}
	a.reply(w, status, map[string]string{"error": err.Error()})
}

func (a *api) reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// refused answers an error of package control with its status.
func (a *api) refused(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch control.KindOf(err) {
	case control.BadInput:
		status = http.StatusBadRequest
	case control.NotFound:
		status = http.StatusNotFound
	case control.Conflict:
		status = http.StatusConflict
	case control.Limit:
		status = http.StatusTooManyRequests
	}
	a.fail(w, r, status, err)
}

// decode reads a JSON body into v; an empty body leaves v as it is when
// optional.
func (a *api) decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.d.MaxBody))
	if err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 && optional {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: not the JSON object this call takes: %v", err)
	}
	return nil
}

func (a *api) start(w http.ResponseWriter, r *http.Request, team string) {
	var req StartRequest
	if err := a.decode(w, r, &req, false); err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if strings.TrimSpace(req.PRD) == "" {
		a.fail(w, r, http.StatusBadRequest, errors.New("prd is required: the PRD's text, YAML or JSON"))
		return
	}
	start, err := a.d.Prepare(team, req)
	if err != nil {
		a.refused(w, r, err)
		return
	}
	if err := a.d.Sessions.Start(r.Context(), start); err != nil {
		a.refused(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/sessions/"+start.Session)
	a.reply(w, http.StatusCreated, control.Started(start).Summary)
}

func (a *api) list(w http.ResponseWriter, r *http.Request, team string) {
	all, err := a.d.Sessions.List(r.Context(), team)
	if err != nil {
		a.refused(w, r, err)
		return
	}
	sums := make([]sessionindex.Summary, len(all))
	for i, e := range all {
		sums[i] = e.Summary
	}
	a.reply(w, http.StatusOK, map[string]any{"sessions": sums})
}

func (a *api) get(w http.ResponseWriter, r *http.Request, team string) {
	e, err := a.d.Sessions.Get(r.Context(), team, r.PathValue("id"))
	if err != nil {
		a.refused(w, r, err)
		return
	}
	a.reply(w, http.StatusOK, e)
}

func (a *api) resume(w http.ResponseWriter, r *http.Request, team string) {
	var req struct {
		Message string `json:"message"`
	}
	if err := a.decode(w, r, &req, false); err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	a.act(w, r, team, func() error {
		_, err := a.d.Sessions.Resume(r.Context(), team, r.PathValue("id"), req.Message)
		return err
	})
}

func (a *api) cancel(w http.ResponseWriter, r *http.Request, team string) {
	var req struct {
		Reason string `json:"reason"`
	}
	if err := a.decode(w, r, &req, true); err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	a.act(w, r, team, func() error {
		_, err := a.d.Sessions.Cancel(r.Context(), team, r.PathValue("id"), req.Reason)
		return err
	})
}

// act does what a person asked of a session and answers 202 with the
// session as it is (the builder applies the request in its own time).
func (a *api) act(w http.ResponseWriter, r *http.Request, team string, do func() error) {
	if err := do(); err != nil {
		a.refused(w, r, err)
		return
	}
	e, err := a.d.Sessions.Get(r.Context(), team, r.PathValue("id"))
	if err != nil {
		a.refused(w, r, err)
		return
	}
	a.reply(w, http.StatusAccepted, e.Summary)
}

// events streams the session's events as server-sent events: every event
// from the start (or from the stream sequence ?from_seq=N, or after the
// one a reconnecting client names in Last-Event-ID), then live, each as
// `id: <seq>`, `event: <type>`, `data: <envelope>`, and a `: keepalive`
// comment when nothing was sent for KeepAlive.
func (a *api) events(w http.ResponseWriter, r *http.Request, team string) {
	id := r.PathValue("id")
	if _, err := a.d.Sessions.Get(r.Context(), team, id); err != nil {
		a.refused(w, r, err)
		return
	}
	var from bus.From
	if v := r.URL.Query().Get("from_seq"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			a.fail(w, r, http.StatusBadRequest, fmt.Errorf("from_seq %q: a stream sequence is a whole number from 1", v))
			return
		}
		from.Seq = n
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			a.fail(w, r, http.StatusBadRequest, fmt.Errorf("Last-Event-ID %q: not an event id of this stream", v))
			return
		}
		from.Seq = n + 1
	}
	b, err := a.d.Bus.ForTeam(team)
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		a.fail(w, r, http.StatusInternalServerError, errors.New("the server cannot stream"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	evs := make(chan bus.Stored, 64)
	done := make(chan error, 1)
	go func() {
		done <- b.FollowFrom(ctx, id, from, func(ev bus.Stored) (bool, error) {
			select {
			case evs <- ev:
				return false, nil
			case <-ctx.Done():
				return true, nil
			}
		})
	}()
	idle := time.NewTimer(a.d.KeepAlive)
	defer idle.Stop()
	for {
		select {
		case ev := <-evs:
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, ev.Envelope.Marshal()); err != nil {
				return
			}
			flusher.Flush()
			idle.Reset(a.d.KeepAlive)
		case <-idle.C:
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return
			}
			flusher.Flush()
			idle.Reset(a.d.KeepAlive)
		case err := <-done:
			if err != nil && ctx.Err() == nil {
				a.d.Log.Warn("event stream ended", zap.String("session", id), zap.Error(err))
			}
			return
		case <-ctx.Done():
			return
		}
	}
}
