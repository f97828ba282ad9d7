package scriptllm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxRequestBody bounds what one request may make the server hold in
// memory; real agent conversations stay far below it.
const maxRequestBody = 32 << 20

// statusClientGone is recorded when the client cancelled while the answer
// was being delayed (nginx's "client closed request"); no response is sent.
const statusClientGone = 499

// lastMessagePreview is how many characters of the last message a no-match
// error quotes: enough to recognise the request, short enough to read.
const lastMessagePreview = 200

// Server answers OpenAI chat-completions requests from a Script. It is safe
// for concurrent use. Use Start/Close to run it on its own loopback
// listener, or mount it as an http.Handler.
type Server struct {
	mu        sync.Mutex
	rules     []compiledRule
	scriptErr error // why the current script is invalid; answers 500 while set
	used      []int // matches per rule, for Rule.Times
	records   []Recorded
	nextResp  int
	nextCall  int

	httpSrv *http.Server
	done    chan struct{} // closed when Serve returns
	closed  bool
}

// Recorded is one chat-completions request as the server saw it, for tests
// to assert on what the client sent and which rule answered.
type Recorded struct {
	Model    string
	Turn     int
	Messages []Message
	// RuleName and RuleIndex identify the rule that matched; RuleIndex is -1
	// (and RuleName empty) when none did or the request was rejected.
	RuleName  string
	RuleIndex int
	// Status is the HTTP status answered; 0 while a delayed answer is still
	// pending, 499 if the client gave up during the delay.
	Status int
	// MaxCompletionTokens is the request's max_completion_tokens, 0 when it
	// sent none.
	MaxCompletionTokens int
}

// New returns a server for s. An invalid script is reported by Start, and a
// mounted server answers 500 naming the problem, so a broken test script
// fails loudly instead of producing confusing no-match errors.
func New(s Script) *Server {
	srv := &Server{}
	srv.setScriptLocked(s)
	return srv
}

// SetScript replaces the rules, e.g. between phases of a test. Times
// counters start again from zero; recorded requests are kept.
func (s *Server) SetScript(sc Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setScriptLocked(sc)
}

func (s *Server) setScriptLocked(sc Script) {
	rules, err := compile(sc)
	s.rules, s.scriptErr = rules, err
	s.used = make([]int, len(rules))
}

// Start listens on a free loopback port and serves in the background. It
// returns the base URL to put in openai.ClientConfig.BaseURL, e.g.
// "http://127.0.0.1:41234/v1".
func (s *Server) Start() (baseURL string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return "", errors.New("scriptllm: start: server is closed")
	case s.httpSrv != nil:
		return "", errors.New("scriptllm: start: server already started")
	case s.scriptErr != nil:
		return "", fmt.Errorf("scriptllm: start: invalid script: %w", s.scriptErr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("scriptllm: start: listen on loopback: %w", err)
	}
	s.httpSrv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		// Serve only returns ErrServerClosed after Close, or an accept error
		// on a listener we own; neither has anyone to report to, and the
		// client sees the connection failure.
		_ = srv.Serve(ln)
	}(s.httpSrv, s.done)
	return "http://" + ln.Addr().String() + "/v1", nil
}

// Close stops the listener and drops open connections, which also cancels
// any delayed answers. It is safe to call more than once or without Start.
func (s *Server) Close() error {
	s.mu.Lock()
	srv, done := s.httpSrv, s.done
	s.httpSrv, s.done, s.closed = nil, nil, true
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Close()
	<-done
	if err != nil {
		return fmt.Errorf("scriptllm: close: %w", err)
	}
	return nil
}

// ServeHTTP routes the OpenAI endpoints scriptllm implements: POST
// /v1/chat/completions and GET /v1/models, also without the /v1 prefix
// because some clients put /v1 in the base URL and some do not.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch path {
	case "/v1/chat/completions", "/chat/completions":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "scriptllm: "+path+" accepts POST only")
			return
		}
		s.handleChat(w, r)
	case "/v1/models", "/models":
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "scriptllm: "+path+" accepts GET only")
			return
		}
		s.handleModels(w)
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("scriptllm: no endpoint %s %s", r.Method, r.URL.Path))
	}
}

// handleModels lists the models named by rules, so clients that check the
// model list before chatting accept the scripted models.
func (s *Server) handleModels(w http.ResponseWriter) {
	s.mu.Lock()
	seen := map[string]bool{}
	list := modelList{Object: "list", Data: []modelInfo{}}
	for _, r := range s.rules {
		if r.Model == "" || seen[r.Model] {
			continue
		}
		seen[r.Model] = true
		list.Data = append(list.Data, modelInfo{ID: r.Model, Object: "model", OwnedBy: "scriptllm"})
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

// answer is everything handleChat needs after choosing a rule, captured
// under the lock so that a concurrent SetScript cannot change it midway.
type answer struct {
	record  int // index into s.records
	rule    compiledRule
	index   int // rule index, -1 if none matched
	respID  string
	callIDs []string
	noMatch string // the 422 message when index is -1
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		s.reject(w, parsedRequest{}, http.StatusBadRequest, "scriptllm: bad request: read body: "+err.Error())
		return
	}
	req, err := parseRequest(body)
	if err != nil {
		s.reject(w, req, http.StatusBadRequest, "scriptllm: bad request: "+err.Error())
		return
	}
	if req.Stream {
		s.reject(w, req, http.StatusBadRequest, "streaming not supported by scriptllm")
		return
	}
	if len(req.Messages) == 0 {
		s.reject(w, req, http.StatusBadRequest, "scriptllm: bad request: messages must not be empty")
		return
	}

	a, scriptErr := s.choose(req)
	if scriptErr != nil {
		s.setStatus(a.record, http.StatusInternalServerError)
		writeError(w, http.StatusInternalServerError, "scriptllm_error", "scriptllm: invalid script: "+scriptErr.Error())
		return
	}
	if a.index < 0 {
		s.setStatus(a.record, http.StatusUnprocessableEntity)
		writeError(w, http.StatusUnprocessableEntity, "scriptllm_error", a.noMatch)
		return
	}

	if d := a.rule.Delay.Std(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			s.setStatus(a.record, statusClientGone)
			return
		}
	}

	if e := a.rule.Error; e != nil {
		msg := e.Message
		if msg == "" {
			msg = http.StatusText(e.Status)
		}
		if e.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
		}
		// Status is recorded before writing so that a test inspecting
		// Requests() right after the client returns sees the final value.
		s.setStatus(a.record, e.Status)
		writeError(w, e.Status, "scripted_error", msg)
		return
	}
	if raw := a.rule.Raw; raw != nil {
		status, ctype := raw.Status, raw.ContentType
		if status == 0 {
			status = http.StatusOK
		}
		if ctype == "" {
			ctype = "application/json"
		}
		s.setStatus(a.record, status)
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		// Nobody is left to tell if the client went away.
		_, _ = io.WriteString(w, raw.Body)
		return
	}
	resp := buildResponse(req, a)
	s.setStatus(a.record, http.StatusOK)
	writeJSON(w, http.StatusOK, resp)
}

// choose records the request and picks the first rule that matches and is
// not used up, counting the match against Times. Matching and counting
// happen under one lock so concurrent requests can never overrun Times.
func (s *Server) choose(req parsedRequest) (answer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := answer{index: -1}
	a.record = s.recordLocked(req)
	if s.scriptErr != nil {
		return a, s.scriptErr
	}
	var exhausted []string
	for i, r := range s.rules {
		if !r.matches(req) {
			continue
		}
		if r.Times > 0 && s.used[i] >= r.Times {
			exhausted = append(exhausted, ruleLabel(i, r.Name))
			continue
		}
		s.used[i]++
		a.index, a.rule = i, r
		break
	}
	if a.index < 0 {
		a.noMatch = noMatchMessage(req, len(s.rules), exhausted)
		return a, nil
	}
	s.records[a.record].RuleIndex = a.index
	s.records[a.record].RuleName = a.rule.Name
	s.nextResp++
	a.respID = fmt.Sprintf("chatcmpl-scriptllm-%d", s.nextResp)
	if a.rule.Reply != nil {
		for range a.rule.Reply.ToolCalls {
			s.nextCall++
			// Server-wide numbering keeps IDs unique across the turns of a
			// conversation, as clients pair tool results with calls by ID.
			a.callIDs = append(a.callIDs, fmt.Sprintf("call_%d", s.nextCall))
		}
	}
	return a, nil
}

func ruleLabel(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("rule %d", i)
	}
	return fmt.Sprintf("rule %d (%s)", i, name)
}

// noMatchMessage describes the request well enough that a failing test
// shows which script rule is missing.
func noMatchMessage(req parsedRequest, rules int, exhausted []string) string {
	last := req.Messages[len(req.Messages)-1]
	preview := last.Content
	if runeLen(preview) > lastMessagePreview {
		preview = string([]rune(preview)[:lastMessagePreview]) + "..."
	}
	msg := fmt.Sprintf("scriptllm: no rule matches request: model %q, turn %d, %d messages, last message (%s): %q; script has %d rules",
		req.Model, req.Turn, len(req.Messages), last.Role, preview, rules)
	if len(exhausted) > 0 {
		msg += "; matching but used up (times): " + strings.Join(exhausted, ", ")
	}
	return msg
}

func buildResponse(req parsedRequest, a answer) chatResponse {
	reply := a.rule.Reply
	msg := responseMessage{Role: "assistant", Content: reply.Content}
	completionChars := runeLen(reply.Content)
	for i, tc := range reply.ToolCalls {
		args := a.rule.arguments[i]
		msg.ToolCalls = append(msg.ToolCalls, wireToolCall{
			ID:       a.callIDs[i],
			Type:     "function",
			Function: wireFunction{Name: tc.Name, Arguments: args},
		})
		completionChars += runeLen(tc.Name) + runeLen(args)
	}
	finish := reply.FinishReason
	if finish == "" {
		finish = "stop"
		if len(msg.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	promptChars := 0
	for _, m := range req.Messages {
		promptChars += runeLen(m.Content)
	}
	u := usage{PromptTokens: estimateTokens(promptChars), CompletionTokens: estimateTokens(completionChars)}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return chatResponse{
		ID:      a.respID,
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   req.Model,
		Choices: []chatChoice{{Index: 0, Message: msg, FinishReason: finish}},
		Usage:   u,
	}
}

// reject records and answers a request that never reached rule matching.
func (s *Server) reject(w http.ResponseWriter, req parsedRequest, status int, message string) {
	s.mu.Lock()
	i := s.recordLocked(req)
	s.records[i].Status = status
	s.mu.Unlock()
	writeError(w, status, "invalid_request_error", message)
}
