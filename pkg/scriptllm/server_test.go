package scriptllm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

const testModel = "test-model"

func mustParse(t *testing.T, src string) Script {
	t.Helper()
	s, err := ParseScript([]byte(src), ".yaml")
	if err != nil {
		t.Fatalf("ParseScript: %v", err)
	}
	return s
}

// start runs a server for the script and returns it with a real go-openai
// client pointed at it.
func start(t *testing.T, src string) (*Server, *openai.Client, string) {
	t.Helper()
	srv := New(mustParse(t, src))
	baseURL, err := srv.Start()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	cfg := openai.DefaultConfig("x")
	cfg.BaseURL = baseURL
	return srv, openai.NewClientWithConfig(cfg), baseURL
}

func user(s string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: s}
}

func assistant(s string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: s}
}

func system(s string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: s}
}

func toolResult(id, s string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, Content: s, ToolCallID: id}
}

func chat(t *testing.T, c *openai.Client, msgs ...openai.ChatCompletionMessage) openai.ChatCompletionResponse {
	t.Helper()
	resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: testModel, Messages: msgs})
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	return resp
}

func content(t *testing.T, c *openai.Client, msgs ...openai.ChatCompletionMessage) string {
	t.Helper()
	resp := chat(t, c, msgs...)
	if len(resp.Choices) != 1 {
		t.Fatalf("got %d choices, want 1", len(resp.Choices))
	}
	return resp.Choices[0].Message.Content
}

func apiError(t *testing.T, err error) *openai.APIError {
	t.Helper()
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v (%T) is not an *openai.APIError", err, err)
	}
	return apiErr
}

func TestToolCallsReply(t *testing.T) {
	_, c, _ := start(t, `
rules:
  - reply:
      content: "looking"
      tool_calls:
        - name: read_file
          arguments: {path: README.md, lines: [1, 2], opts: {follow: true}}
        - name: broken
          arguments: '{"path": "unterminated'
`)
	resp := chat(t, c, user("read it"))
	if resp.Object != "chat.completion" || resp.Model != testModel || !strings.HasPrefix(resp.ID, "chatcmpl-") {
		t.Errorf("envelope = id %q object %q model %q", resp.ID, resp.Object, resp.Model)
	}
	ch := resp.Choices[0]
	if ch.FinishReason != openai.FinishReasonToolCalls {
		t.Errorf("finish_reason = %q, want tool_calls", ch.FinishReason)
	}
	if ch.Message.Role != openai.ChatMessageRoleAssistant || ch.Message.Content != "looking" {
		t.Errorf("message = %+v", ch.Message)
	}
	calls := ch.Message.ToolCalls
	if len(calls) != 2 {
		t.Fatalf("got %d tool calls, want 2", len(calls))
	}
	if calls[0].ID != "call_1" || calls[1].ID != "call_2" || calls[0].Type != openai.ToolTypeFunction {
		t.Errorf("tool call ids/types = %q %q %q", calls[0].ID, calls[1].ID, calls[0].Type)
	}
	if calls[0].Function.Name != "read_file" {
		t.Errorf("name = %q", calls[0].Function.Name)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(calls[0].Function.Arguments), &args); err != nil {
		t.Fatalf("arguments %q are not JSON: %v", calls[0].Function.Arguments, err)
	}
	want := map[string]any{"path": "README.md", "lines": []any{1.0, 2.0}, "opts": map[string]any{"follow": true}}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("arguments = %v, want %v", args, want)
	}
	if got := calls[1].Function.Arguments; got != `{"path": "unterminated` {
		t.Errorf("verbatim arguments = %q", got)
	}
	if resp.Usage.PromptTokens != 2 || resp.Usage.CompletionTokens <= 0 ||
		resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
		t.Errorf("usage = %+v, want prompt 2 (ceil(7/4)) and a consistent total", resp.Usage)
	}

	// IDs keep counting across requests so a conversation never reuses one.
	resp = chat(t, c, user("again"))
	if id := resp.Choices[0].Message.ToolCalls[0].ID; id != "call_3" {
		t.Errorf("second response first call id = %q, want call_3", id)
	}
}

func TestFinishReasonDefaultsAndOverride(t *testing.T) {
	_, c, _ := start(t, `
rules:
  - when: {last_contains: cut}
    reply: {content: "trunc", finish_reason: length}
  - reply: {content: "plain"}
`)
	if fr := chat(t, c, user("hello")).Choices[0].FinishReason; fr != openai.FinishReasonStop {
		t.Errorf("default finish_reason = %q, want stop", fr)
	}
	if fr := chat(t, c, user("cut")).Choices[0].FinishReason; fr != openai.FinishReasonLength {
		t.Errorf("override finish_reason = %q, want length", fr)
	}
}

func TestTurnMatching(t *testing.T) {
	_, c, _ := start(t, `
rules:
  - when: {turn: 1}
    reply: {content: first}
  - when: {turn: 2}
    reply: {content: second}
  - when: {turn: 3}
    reply: {content: third}
`)
	if got := content(t, c, system("sys"), user("go")); got != "first" {
		t.Errorf("turn 1 = %q", got)
	}
	if got := content(t, c, user("go"), assistant("a"), user("more")); got != "second" {
		t.Errorf("turn 2 = %q", got)
	}
	// An assistant message carrying only tool calls still counts as a turn.
	callOnly := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{
		ID: "call_9", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "f", Arguments: "{}"},
	}}}
	if got := content(t, c, user("go"), assistant("a"), user("more"), callOnly, toolResult("call_9", "out")); got != "third" {
		t.Errorf("turn 3 = %q", got)
	}
}

func TestContainsMatching(t *testing.T) {
	_, c, _ := start(t, `
rules:
  - name: model-specific
    model: other-model
    reply: {content: other}
  - name: tool-result
    when: {last_role: tool, last_contains: "exit 1"}
    reply: {content: failed}
  - name: system
    when: {system_contains: "reviewer"}
    reply: {content: reviewing}
  - name: build-task
    when: {first_user_contains: "build", not_contains: "SECRET"}
    reply: {content: building}
  - name: any
    when: {any_contains: "needle"}
    reply: {content: found}
  - name: fallback
    reply: {content: fallback}
`)
	tests := []struct {
		name string
		msgs []openai.ChatCompletionMessage
		want string
	}{
		{"last tool result", []openai.ChatCompletionMessage{user("build it"), assistant("ok"), toolResult("c1", "exit 1: boom")}, "failed"},
		{"tool result without match falls through", []openai.ChatCompletionMessage{user("build it"), assistant("ok"), toolResult("c1", "exit 0")}, "building"},
		{"last_contains needs last role", []openai.ChatCompletionMessage{user("exit 1")}, "fallback"},
		{"system", []openai.ChatCompletionMessage{system("you are a reviewer"), user("build")}, "reviewing"},
		{"system text in user message does not count", []openai.ChatCompletionMessage{user("reviewer")}, "fallback"},
		{"first user only", []openai.ChatCompletionMessage{user("hello"), assistant("hi"), user("build")}, "fallback"},
		{"not_contains blocks", []openai.ChatCompletionMessage{user("build"), assistant("SECRET")}, "fallback"},
		{"any", []openai.ChatCompletionMessage{user("hello"), assistant("needle here"), user("x")}, "found"},
		{"array-of-parts content", []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, MultiContent: []openai.ChatMessagePart{
			{Type: openai.ChatMessagePartTypeText, Text: "please bu"},
			{Type: openai.ChatMessagePartTypeImageURL, ImageURL: &openai.ChatMessageImageURL{URL: "http://x/y.png"}},
			{Type: openai.ChatMessagePartTypeText, Text: "ild this"},
		}}}, "building"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := content(t, c, tt.msgs...); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}

	resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "other-model", Messages: []openai.ChatCompletionMessage{user("build")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "other" || resp.Model != "other-model" {
		t.Errorf("model rule: content %q model %q", got, resp.Model)
	}
}

func TestTimesFallsThrough(t *testing.T) {
	srv, c, _ := start(t, `
rules:
  - name: flaky
    times: 2
    reply: {content: limited}
  - name: steady
    reply: {content: steady}
`)
	for i, want := range []string{"limited", "limited", "steady", "steady"} {
		if got := content(t, c, user("x")); got != want {
			t.Errorf("request %d = %q, want %q", i, got, want)
		}
	}
	if srv.Hits("flaky") != 2 || srv.Hits("steady") != 2 || srv.Hits("nope") != 0 {
		t.Errorf("hits flaky=%d steady=%d", srv.Hits("flaky"), srv.Hits("steady"))
	}

	// SetScript restarts the Times counters but keeps the recording.
	srv.SetScript(mustParse(t, "rules:\n  - name: flaky\n    times: 1\n    reply: {content: again}\n  - reply: {content: rest}\n"))
	if got := content(t, c, user("x")); got != "again" {
		t.Errorf("after SetScript = %q, want again", got)
	}
	if got := content(t, c, user("x")); got != "rest" {
		t.Errorf("after SetScript second = %q, want rest", got)
	}
	if n := srv.Hits("flaky"); n != 3 {
		t.Errorf("Hits(flaky) = %d, want 3", n)
	}
	if n := len(srv.Requests()); n != 6 {
		t.Errorf("recorded %d requests, want 6", n)
	}
}

// A raw rule sends its body as it is, with its status and content type:
// what a broken proxy or a reply cut short looks like to a client.
func TestRawRule(t *testing.T) {
	srv, _, baseURL := start(t, `
rules:
  - name: html
    times: 1
    raw: {body: "<html>Bad gateway</html>", content_type: text/html}
  - name: cut
    raw: {body: '{"id": "chatcmpl-1", "choices": [{"message": {"content": "hal'}
`)
	body := `{"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}`
	for _, want := range []struct{ ctype, body string }{
		{"text/html", "<html>Bad gateway</html>"},
		{"application/json", `{"id": "chatcmpl-1", "choices": [{"message": {"content": "hal`},
	} {
		resp, err := http.Post(baseURL+"/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != want.ctype || string(got) != want.body {
			t.Errorf("got %d %q %q, want 200 %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), got, want.ctype, want.body)
		}
	}
	if srv.Hits("html") != 1 || srv.Hits("cut") != 1 {
		t.Errorf("hits html %d, cut %d; want 1 each", srv.Hits("html"), srv.Hits("cut"))
	}
	if st := srv.Requests()[0].Status; st != http.StatusOK {
		t.Errorf("recorded status %d, want 200", st)
	}
}

func TestErrorRule(t *testing.T) {
	_, c, baseURL := start(t, `
rules:
  - name: limited
    times: 1
    error: {status: 429, message: "slow down", retry_after: 7}
  - error: {status: 503}
`)
	body := `{"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}`
	resp, err := http.Post(baseURL+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("status = %d, want 429", resp.StatusCode)
	}
	if got := resp.Header.Get("Retry-After"); got != "7" {
		t.Errorf("Retry-After = %q, want 7", got)
	}
	var eb struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
		t.Fatalf("decode error body: %v", err)
	}
	if eb.Error.Message != "slow down" || eb.Error.Type != "scripted_error" || eb.Error.Code != 429 {
		t.Errorf("error body = %+v", eb.Error)
	}

	// The real client sees the next rule as a typed API error.
	_, err = c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: testModel, Messages: []openai.ChatCompletionMessage{user("hi")}})
	apiErr := apiError(t, err)
	if apiErr.HTTPStatusCode != http.StatusServiceUnavailable || apiErr.Message != "Service Unavailable" || apiErr.Type != "scripted_error" {
		t.Errorf("api error = %+v", apiErr)
	}
}

func TestDelay(t *testing.T) {
	srv, c, _ := start(t, `
rules:
  - when: {last_contains: slow}
    delay: 100ms
    reply: {content: slow}
  - name: stuck
    when: {last_contains: stuck}
    delay: 1h
    reply: {content: never}
`)
	began := time.Now()
	if got := content(t, c, user("slow")); got != "slow" {
		t.Errorf("got %q", got)
	}
	if elapsed := time.Since(began); elapsed < 100*time.Millisecond {
		t.Errorf("answered after %s, want at least the 100ms delay", elapsed)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: testModel, Messages: []openai.ChatCompletionMessage{user("stuck")}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	// The handler notices the cancellation asynchronously; wait for it
	// rather than assuming how fast that is.
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs := srv.Requests()
		if st := recs[len(recs)-1].Status; st == statusClientGone {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("status of cancelled request = %d, want %d", st, statusClientGone)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if srv.Hits("stuck") != 1 {
		t.Errorf("Hits(stuck) = %d, want 1 (a cancelled answer still used the rule)", srv.Hits("stuck"))
	}
}

func TestCloseCancelsDelayedAnswer(t *testing.T) {
	srv := New(mustParse(t, "rules:\n  - delay: 1h\n    reply: {content: never}\n"))
	baseURL, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	cfg := openai.DefaultConfig("x")
	cfg.BaseURL = baseURL
	c := openai.NewClientWithConfig(cfg)
	errc := make(chan error, 1)
	go func() {
		_, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: testModel, Messages: []openai.ChatCompletionMessage{user("x")}})
		errc <- err
	}()
	for len(srv.Requests()) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-errc; err == nil {
		t.Error("request succeeded after Close, want an error")
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := srv.Start(); err == nil {
		t.Error("Start after Close succeeded, want error")
	}
}

func TestNoMatch(t *testing.T) {
	srv, c, _ := start(t, `
rules:
  - name: once
    times: 1
    reply: {content: x}
  - when: {turn: 5}
    reply: {content: y}
`)
	content(t, c, user("first"))
	long := "tail-marker " + strings.Repeat("z", 300)
	_, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: testModel, Messages: []openai.ChatCompletionMessage{user("a"), assistant("b"), user(long)}})
	apiErr := apiError(t, err)
	if apiErr.HTTPStatusCode != http.StatusUnprocessableEntity {
		t.Errorf("status = %d, want 422", apiErr.HTTPStatusCode)
	}
	for _, want := range []string{"scriptllm: no rule matches request", `model "test-model"`, "turn 2", "tail-marker", "rule 0 (once)"} {
		if !strings.Contains(apiErr.Message, want) {
			t.Errorf("message %q does not contain %q", apiErr.Message, want)
		}
	}
	if strings.Contains(apiErr.Message, strings.Repeat("z", 200)) {
		t.Errorf("message quotes more than 200 characters of the last message: %q", apiErr.Message)
	}
	recs := srv.Requests()
	if last := recs[len(recs)-1]; last.RuleIndex != -1 || last.RuleName != "" || last.Status != http.StatusUnprocessableEntity || last.Turn != 2 {
		t.Errorf("record = %+v", last)
	}
}

func TestRejectedRequests(t *testing.T) {
	srv, c, baseURL := start(t, "rules:\n  - reply: {content: x}\n")

	_, err := c.CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{Model: testModel, Messages: []openai.ChatCompletionMessage{user("x")}})
	apiErr := apiError(t, err)
	if apiErr.HTTPStatusCode != http.StatusBadRequest || !strings.Contains(apiErr.Message, "streaming not supported by scriptllm") {
		t.Errorf("stream error = %+v", apiErr)
	}

	for _, tt := range []struct{ name, body, want string }{
		{"not json", `{"model": `, "decode request body as JSON"},
		{"bad content", `{"model": "m", "messages": [{"role": "user", "content": 5}]}`, "messages[0].content"},
		{"no messages", `{"model": "m", "messages": []}`, "messages must not be empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(baseURL+"/chat/completions", "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tt.want) {
				t.Errorf("got %d %s, want 400 mentioning %q", resp.StatusCode, b, tt.want)
			}
		})
	}

	resp, err := http.Get(baseURL + "/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET chat/completions = %d, want 405", resp.StatusCode)
	}
	resp, err = http.Get(baseURL + "/embeddings")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET embeddings = %d, want 404", resp.StatusCode)
	}

	for _, r := range srv.Requests() {
		if r.Status != http.StatusBadRequest || r.RuleIndex != -1 {
			t.Errorf("rejected request recorded as %+v", r)
		}
	}
}

func TestRecording(t *testing.T) {
	srv, c, _ := start(t, "rules:\n  - name: only\n    reply: {content: ok}\n")
	content(t, c,
		system("sys"),
		user("do it"),
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: "call_1", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "f", Arguments: "{}"}}}},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, Content: "result", Name: "f", ToolCallID: "call_1"},
	)
	recs := srv.Requests()
	if len(recs) != 1 {
		t.Fatalf("recorded %d requests, want 1", len(recs))
	}
	r := recs[0]
	want := []Message{
		{Role: "system", Content: "sys"},
		{Role: "user", Content: "do it"},
		{Role: "assistant"},
		{Role: "tool", Content: "result", Name: "f", ToolCallID: "call_1"},
	}
	if r.Model != testModel || r.Turn != 2 || r.RuleIndex != 0 || r.RuleName != "only" || r.Status != http.StatusOK ||
		r.MaxCompletionTokens != 0 || !reflect.DeepEqual(r.Messages, want) {
		t.Errorf("record = %+v", r)
	}
	// Requests returns a copy; mutating it must not change the server's.
	recs[0].Messages[0].Content = "changed"
	if srv.Requests()[0].Messages[0].Content != "sys" {
		t.Error("Requests exposed internal state")
	}
}

func TestRecordingMaxCompletionTokens(t *testing.T) {
	srv, c, _ := start(t, "rules:\n  - reply: {content: ok}\n")
	_, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Model: testModel, Messages: []openai.ChatCompletionMessage{user("hi")}, MaxCompletionTokens: 123,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests()[0].MaxCompletionTokens; got != 123 {
		t.Fatalf("recorded max_completion_tokens %d, want 123", got)
	}
}

func TestModels(t *testing.T) {
	_, c, _ := start(t, `
rules:
  - model: alpha
    reply: {content: a}
  - model: beta
    reply: {content: b}
  - model: alpha
    reply: {content: a2}
  - reply: {content: any}
`)
	list, err := c.ListModels(context.Background())
	if err != nil {
		t.Fatalf("ListModels: %v", err)
	}
	var ids []string
	for _, m := range list.Models {
		ids = append(ids, m.ID)
	}
	if !reflect.DeepEqual(ids, []string{"alpha", "beta"}) {
		t.Errorf("models = %v, want [alpha beta]", ids)
	}
}

func TestInvalidScript(t *testing.T) {
	bad := Script{Rules: []Rule{{Name: "x", Reply: &Reply{Content: "ok"}}, {Name: "broken"}}}
	srv := New(bad)
	if _, err := srv.Start(); err == nil || !strings.Contains(err.Error(), "rule 1: field reply") {
		t.Errorf("Start error = %v, want it to name rule 1 field reply", err)
	}

	// Mounted, the server reports the broken script on every request.
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "rule 1: field reply") {
		t.Errorf("got %d %s, want 500 naming the rule", rec.Code, rec.Body)
	}

	srv.SetScript(Script{Rules: []Rule{{Reply: &Reply{Content: "fixed"}}}})
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "fixed") {
		t.Errorf("after SetScript got %d %s", rec.Code, rec.Body)
	}
}

func TestMountedUnderPrefix(t *testing.T) {
	srv := New(Script{Rules: []Rule{{Reply: &Reply{Content: "mounted"}}}})
	mux := http.NewServeMux()
	mux.Handle("/llm/", http.StripPrefix("/llm", srv))
	hs := httptest.NewServer(mux)
	defer hs.Close()
	cfg := openai.DefaultConfig("x")
	cfg.BaseURL = hs.URL + "/llm/v1"
	if got := content(t, openai.NewClientWithConfig(cfg), user("hi")); got != "mounted" {
		t.Errorf("got %q", got)
	}
}

func TestConcurrentRequests(t *testing.T) {
	srv, c, _ := start(t, `
rules:
  - name: limited
    times: 10
    delay: 1ms
    reply: {content: limited, tool_calls: [{name: f, arguments: {}}]}
  - name: rest
    reply: {content: rest}
`)
	const n = 25
	var wg sync.WaitGroup
	results := make(chan string, n)
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: testModel, Messages: []openai.ChatCompletionMessage{user("x")}})
			if err != nil {
				errs <- err
				return
			}
			results <- resp.Choices[0].Message.Content
		}()
	}
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Errorf("request failed: %v", err)
	}
	counts := map[string]int{}
	for r := range results {
		counts[r]++
	}
	if counts["limited"] != 10 || counts["rest"] != n-10 {
		t.Errorf("answers = %v, want exactly 10 limited (Times must hold under concurrency)", counts)
	}
	if srv.Hits("limited") != 10 || srv.Hits("rest") != n-10 || len(srv.Requests()) != n {
		t.Errorf("hits limited=%d rest=%d requests=%d", srv.Hits("limited"), srv.Hits("rest"), len(srv.Requests()))
	}
}
