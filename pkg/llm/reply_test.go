package llm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/scriptllm"
)

// scripted runs the scripted OpenAI-compatible server with script and
// returns it with a client (without retries) talking to it over HTTP.
func scripted(t *testing.T, script string) (*scriptllm.Server, *Client) {
	t.Helper()
	s, err := scriptllm.ParseScript([]byte(script), ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := scriptllm.New(s)
	url, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c, err := New(RoleCritic, Endpoint{BaseURL: url, Model: "test-model", MaxRetries: -1, Timeout: 10 * time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

func ask(text string) Request {
	return Request{Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: text}}}
}

func TestReplyReturnsTheMessageAndSendsMaxCompletionTokens(t *testing.T) {
	srv, c := scripted(t, `
rules:
  - reply:
      content: "Let me look."
      tool_calls: [{name: read_file, arguments: {path: go.mod}}]
`)
	r := ask("what module is this?")
	r.Tools = []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "read_file"}}}
	r.MaxTokens = 77
	msg, usage, err := Reply(context.Background(), c, "s1", r)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content != "Let me look." || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "read_file" ||
		msg.ToolCalls[0].Function.Arguments != `{"path":"go.mod"}` {
		t.Errorf("message %+v, want the scripted content and tool call", msg)
	}
	if usage.PromptTokens == 0 || usage.CompletionTokens == 0 {
		t.Errorf("usage %+v, want the server's token counts", usage)
	}
	if got := srv.Requests()[0].MaxCompletionTokens; got != 77 {
		t.Errorf("the server got max_completion_tokens %d, want 77", got)
	}
}

func TestTextIsTheReplysContent(t *testing.T) {
	srv, c := scripted(t, "rules:\n  - reply: {content: '{\"approved\": true}'}\n")
	text, err := Text(context.Background(), c, "s1", ask("is it done?"))
	if err != nil || text != `{"approved": true}` {
		t.Fatalf("Text = %q, %v; want the reply's content", text, err)
	}
	if got := srv.Requests()[0].MaxCompletionTokens; got != 0 {
		t.Errorf("max_completion_tokens %d sent without a bound asked for", got)
	}
}

// Errors are sorted for the bus runner: what a later delivery may fix is
// retried, the rest is given up on at once.
func TestReplySortsErrorsForTheRunner(t *testing.T) {
	for _, tc := range []struct {
		status    int
		permanent bool
	}{
		{503, false},
		{500, false},
		{429, false},
		{401, true},
		{400, true},
		{404, true},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			_, c := scripted(t, fmt.Sprintf("rules:\n  - error: {status: %d, message: scripted failure}\n", tc.status))
			_, _, err := Reply(context.Background(), c, "s1", ask("hi"))
			if err == nil {
				t.Fatal("Reply succeeded against a failing server")
			}
			if bus.IsPermanent(err) != tc.permanent || IsRetryable(err) == tc.permanent {
				t.Fatalf("status %d: IsPermanent %v, IsRetryable %v (%v); want permanent %v", tc.status, bus.IsPermanent(err), IsRetryable(err), err, tc.permanent)
			}
		})
	}
}

// fakeChatter answers every call with resp and err.
type fakeChatter struct {
	resp openai.ChatCompletionResponse
	err  error
}

func (f fakeChatter) Chat(context.Context, string, openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	return f.resp, f.err
}

func TestReplyRefusesAResponseWithoutChoices(t *testing.T) {
	_, _, err := Reply(context.Background(), fakeChatter{resp: openai.ChatCompletionResponse{}}, "s1", ask("hi"))
	if !errors.Is(err, ErrNoChoices) || bus.IsPermanent(err) {
		t.Fatalf("Reply = %v, want a retryable ErrNoChoices", err)
	}
}

// A handler cancelled by shutdown fails however the client words it; that
// says nothing about the request, which another replica will send again.
func TestReplyOfACancelledHandlerIsNotPermanent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := Reply(ctx, fakeChatter{err: errors.New("request aborted")}, "s1", ask("hi"))
	if err == nil || bus.IsPermanent(err) {
		t.Fatalf("Reply = %v, want a retryable error", err)
	}
}
