package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

type usageCall struct {
	session string
	role    Role
	in, out int
}

type fakeRecorder struct {
	mu    sync.Mutex
	calls []usageCall
	err   error
}

func (f *fakeRecorder) RecordUsage(ctx context.Context, session string, role Role, in, out int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, usageCall{session, role, in, out})
	return f.err
}

// completion is a minimal OpenAI chat completion response body.
func completion(model, content string, in, out int) string {
	b, _ := json.Marshal(map[string]any{
		"id":      "chatcmpl-test",
		"object":  "chat.completion",
		"created": 1,
		"model":   model,
		"choices": []map[string]any{{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": content},
			"finish_reason": "stop",
		}},
		"usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
	})
	return string(b)
}

func apiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"error":{"message":%q,"type":"test_error"}}`, msg)
}

// server runs handler for POST /v1/chat/completions and counts attempts.
func server(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, attempt int)) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		handler(w, r, int(attempts.Add(1)))
	}))
	t.Cleanup(srv.Close)
	return srv, &attempts
}

func newClient(t *testing.T, ep Endpoint, usage UsageRecorder) *Client {
	t.Helper()
	if ep.Model == "" {
		ep.Model = "test-model"
	}
	c, err := New(RoleBuilder, ep, usage, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Keep waits from slowing the tests: they are recorded, not waited.
	c.transport.initial = time.Millisecond
	recordSleeps(c)
	return c
}

// sleeps records the waits between attempts instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// recordSleeps makes c record its waits between attempts instead of
// waiting, and returns the record.
func recordSleeps(c *Client) *sleeps {
	s := &sleeps{}
	c.transport.sleep = s.sleep
	return s
}

func request() openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleUser, Content: "hello"},
	}}
}

func TestChatSuccessRecordsUsage(t *testing.T) {
	var gotAuth, gotModel string
	srv, attempts := server(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		gotAuth = r.Header.Get("Authorization")
		var req openai.ChatCompletionRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			apiError(w, http.StatusBadRequest, err.Error())
			return
		}
		gotModel = req.Model
		io.WriteString(w, completion(req.Model, "hi there", 11, 7))
	})
	rec := &fakeRecorder{}
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Model: "qwen"}, rec)

	if c.Model() != "qwen" || c.Role() != RoleBuilder {
		t.Fatalf("Model, Role = %q, %q", c.Model(), c.Role())
	}
	resp, err := c.Chat(context.Background(), "s1", request())
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "hi there" {
		t.Errorf("content = %q", got)
	}
	if gotModel != "qwen" {
		t.Errorf("request model = %q, want the endpoint's model", gotModel)
	}
	if gotAuth != "Bearer sk-test" {
		t.Errorf("Authorization = %q", gotAuth)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("attempts = %d, want 1", n)
	}
	want := []usageCall{{"s1", RoleBuilder, 11, 7}}
	if fmt.Sprint(rec.calls) != fmt.Sprint(want) {
		t.Errorf("usage = %v, want %v", rec.calls, want)
	}
}

func TestChatKeepsRequestModelAndOmitsEmptyKey(t *testing.T) {
	var gotAuth, gotModel string
	srv, _ := server(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		gotAuth = r.Header.Get("Authorization")
		var req openai.ChatCompletionRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		gotModel = req.Model
		io.WriteString(w, completion(req.Model, "ok", 1, 1))
	})
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1", Model: "default"}, nil)
	req := request()
	req.Model = "other"
	if _, err := c.Chat(context.Background(), "s1", req); err != nil {
		t.Fatal(err)
	}
	if gotModel != "other" {
		t.Errorf("model = %q, want the request's own", gotModel)
	}
	if gotAuth != "" {
		t.Errorf("Authorization = %q, want none for an empty key", gotAuth)
	}
}

func TestChatUsageErrorDoesNotFailCall(t *testing.T) {
	srv, _ := server(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		io.WriteString(w, completion("m", "ok", 3, 4))
	})
	rec := &fakeRecorder{err: errors.New("redis down")}
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1"}, rec)
	if _, err := c.Chat(context.Background(), "s1", request()); err != nil {
		t.Fatalf("Chat failed because usage could not be recorded: %v", err)
	}
	if len(rec.calls) != 1 {
		t.Errorf("usage calls = %d, want 1", len(rec.calls))
	}
}

func TestChatRetriesAfter429HonouringRetryAfter(t *testing.T) {
	bodies := make([]string, 0, 2)
	var mu sync.Mutex
	srv, attempts := server(t, func(w http.ResponseWriter, r *http.Request, attempt int) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if attempt == 1 {
			w.Header().Set("Retry-After", "1")
			apiError(w, http.StatusTooManyRequests, "slow down")
			return
		}
		io.WriteString(w, completion("m", "ok", 1, 1))
	})
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1"}, nil)
	waits := recordSleeps(c)
	if _, err := c.Chat(context.Background(), "s1", request()); err != nil {
		t.Fatal(err)
	}
	if n := attempts.Load(); n != 2 {
		t.Errorf("attempts = %d, want 2", n)
	}
	if got := waits.all(); len(got) != 1 || got[0] != time.Second {
		t.Errorf("waited %v, want the 1s Retry-After", got)
	}
	if len(bodies) != 2 || bodies[0] == "" || bodies[0] != bodies[1] {
		t.Errorf("bodies were not resent intact: %q", bodies)
	}
}

func TestChatRetries503ThenSucceeds(t *testing.T) {
	srv, attempts := server(t, func(w http.ResponseWriter, r *http.Request, attempt int) {
		if attempt <= 3 {
			apiError(w, http.StatusServiceUnavailable, "loading model")
			return
		}
		io.WriteString(w, completion("m", "ok", 1, 1))
	})
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1"}, nil)
	if _, err := c.Chat(context.Background(), "s1", request()); err != nil {
		t.Fatal(err)
	}
	if n := attempts.Load(); n != 4 {
		t.Errorf("attempts = %d, want 4", n)
	}
}

func TestChatDoesNotRetryClientErrors(t *testing.T) {
	for _, code := range []int{400, 401, 403, 404, 422} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			srv, attempts := server(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				apiError(w, code, "bad request")
			})
			c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1"}, nil)
			_, err := c.Chat(context.Background(), "s1", request())
			if err == nil {
				t.Fatal("want an error")
			}
			if n := attempts.Load(); n != 1 {
				t.Errorf("attempts = %d, want 1", n)
			}
			if IsRetryable(err) {
				t.Errorf("IsRetryable(%v) = true, want false", err)
			}
			if !strings.HasPrefix(err.Error(), "llm builder: chat completion: ") {
				t.Errorf("error %q does not say what was being done", err)
			}
		})
	}
}

func TestChatRetriesExhaustedIsRetryable(t *testing.T) {
	for _, code := range []int{http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			srv, attempts := server(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				apiError(w, code, "still failing")
			})
			c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1", MaxRetries: 2}, nil)
			_, err := c.Chat(context.Background(), "s1", request())
			if !IsRetryable(err) {
				t.Fatalf("IsRetryable(%v) = false, want true", err)
			}
			if n := attempts.Load(); n != 3 {
				t.Errorf("attempts = %d, want 3", n)
			}
			var apiErr *openai.APIError
			if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != code {
				t.Errorf("error %v does not carry the status %d", err, code)
			}
		})
	}
}

func TestChatNegativeMaxRetriesDisablesRetries(t *testing.T) {
	srv, attempts := server(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		apiError(w, http.StatusServiceUnavailable, "down")
	})
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1", MaxRetries: -1}, nil)
	if _, err := c.Chat(context.Background(), "s1", request()); !IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = false", err)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("attempts = %d, want 1", n)
	}
}

func TestChatConnectionRefusedIsRetryable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL + "/v1"
	srv.Close() // nothing listens on the port any more
	c := newClient(t, Endpoint{BaseURL: base, MaxRetries: 2}, nil)
	_, err := c.Chat(context.Background(), "s1", request())
	if !IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = false, want true", err)
	}
	if !strings.Contains(err.Error(), "after 3 attempts") {
		t.Errorf("error %q does not say the retries were used", err)
	}
}

func TestChatTimeoutIsRetryable(t *testing.T) {
	release := make(chan struct{})
	srv, attempts := server(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		// The server only notices the client going away once the body is
		// read; release unblocks the handler so srv.Close does not wait.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1", Timeout: 100 * time.Millisecond}, nil)
	_, err := c.Chat(context.Background(), "s1", request())
	if !IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = false, want true", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after 100ms") {
		t.Errorf("error %q does not say the call timed out", err)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("attempts = %d, want 1: a timed-out attempt goes back to the caller, not round again", n)
	}
}

func TestChatGivesUpWhenRetryAfterOutlivesDeadline(t *testing.T) {
	srv, attempts := server(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		w.Header().Set("Retry-After", "30")
		apiError(w, http.StatusTooManyRequests, "slow down")
	})
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Chat(ctx, "s1", request())
	if !IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = false, want true", err)
	}
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusTooManyRequests {
		t.Errorf("error %v should be the 429 itself, not a timeout", err)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("attempts = %d, want 1", n)
	}
}

func TestChatCallerCancelStopsRetries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv, attempts := server(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		cancel()
		w.Header().Set("Retry-After", "5")
		apiError(w, http.StatusServiceUnavailable, "down")
	})
	c := newClient(t, Endpoint{BaseURL: srv.URL + "/v1"}, nil)
	_, err := c.Chat(ctx, "s1", request())
	if err == nil {
		t.Fatal("want an error")
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("attempts = %d, want 1 after the caller cancelled", n)
	}
	if !IsRetryable(err) {
		t.Errorf("IsRetryable(%v) = false; a cancelled call should be redelivered, not dead-lettered", err)
	}
}

func TestNewConfigErrors(t *testing.T) {
	cases := []struct {
		role Role
		ep   Endpoint
		want []string
	}{
		{RoleCritic, Endpoint{Model: "m"}, []string{"critic", "BaseURL"}},
		{RoleCritic, Endpoint{BaseURL: "http://127.0.0.1:8080/v1"}, []string{"critic", "Model"}},
		{RoleSummarizer, Endpoint{BaseURL: "127.0.0.1:8080/v1", Model: "m"}, []string{"summarizer", "BaseURL"}},
		{"", Endpoint{BaseURL: "http://127.0.0.1:8080/v1", Model: "m"}, []string{"role"}},
	}
	for _, tc := range cases {
		_, err := New(tc.role, tc.ep, nil, nil)
		if err == nil {
			t.Errorf("New(%q, %+v) succeeded, want an error", tc.role, tc.ep)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("New(%q, %+v) error %q does not mention %q", tc.role, tc.ep, err, w)
			}
		}
	}
}

func TestNewDefaults(t *testing.T) {
	c, err := New(RolePruner, Endpoint{BaseURL: "http://127.0.0.1:8080/v1", Model: "m"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if c.ep.Timeout != d.Timeout || c.transport.maxRetries != d.MaxRetries || c.transport.maxBackoff != d.MaxBackoff ||
		c.transport.timeout != d.Timeout || c.transport.maxRetryWait != d.MaxRetryWait ||
		d.Timeout != 120*time.Second || d.MaxRetries != 3 || d.MaxBackoff != 30*time.Second || d.MaxRetryWait != 5*time.Minute {
		t.Errorf("defaults not applied: %+v", c.ep)
	}
}

func TestConfigEndpoint(t *testing.T) {
	c := Config{BaseURL: "http://shared/v1", APIKey: "k", Timeout: time.Second, MaxRetries: 0, MaxBackoff: time.Second, MaxRetryWait: time.Minute}
	ep := c.Endpoint(RoleConfig{Model: "m"})
	if ep.BaseURL != "http://shared/v1" || ep.APIKey != "k" || ep.Model != "m" || ep.MaxRetries != -1 || ep.MaxRetryWait != time.Minute {
		t.Errorf("shared endpoint: %+v (zero retries must mean none)", ep)
	}
	ep = c.Endpoint(RoleConfig{Model: "m", BaseURL: "http://own/v1", APIKey: "own"})
	if ep.BaseURL != "http://own/v1" || ep.APIKey != "own" {
		t.Errorf("own endpoint: %+v", ep)
	}
	bad := Config{BaseURL: "localhost:8080", Timeout: 0, MaxBackoff: time.Second, MaxRetryWait: time.Minute}.Validate()
	if bad == nil || bad.Error() != "BaseURL: not an absolute http(s) URL, got localhost:8080; Timeout: must be positive, got 0s" {
		t.Errorf("Validate = %v", bad)
	}
	if err := (RoleConfig{}).Validate(); err == nil || err.Error() != "Model: must not be empty, got " {
		t.Errorf("RoleConfig.Validate = %v", err)
	}
}
