package llm

import (
	"context"
	"errors"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ralphmesh/ralph/pkg/bus"
)

// Chatter is what Reply needs of a model: a *Client, or a test's fake.
type Chatter interface {
	Chat(ctx context.Context, session string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// ErrNoChoices is returned by Reply for a response without a choice. A
// server only sends one when something went wrong on its side, so it is
// retryable.
var ErrNoChoices = errors.New("llm: reply without choices")

// Request is what a service's handler asks its model.
type Request struct {
	Messages []openai.ChatCompletionMessage
	Tools    []openai.Tool
	// MaxTokens bounds the reply, sent as max_completion_tokens (max_tokens
	// is deprecated and refused by reasoning models); zero sends no bound.
	MaxTokens int
}

// Reply asks m for one completion on behalf of session's event handler and
// returns the first choice's message and the tokens used. Its errors are
// sorted the way the bus runner acts on them: what a later delivery may fix
// (a rate limit, a server error, a timeout, a dropped connection, a reply
// without choices, the handler being cancelled) is returned as it is, to be
// retried; anything else (a rejected key, an unknown model, a malformed
// request) is bus.Permanent, so the event is given up on at once.
func Reply(ctx context.Context, m Chatter, session string, r Request) (openai.ChatCompletionMessage, openai.Usage, error) {
	resp, err := m.Chat(ctx, session, openai.ChatCompletionRequest{
		Messages:            r.Messages,
		Tools:               r.Tools,
		MaxCompletionTokens: r.MaxTokens,
	})
	switch {
	case err != nil && (IsRetryable(err) || ctx.Err() != nil):
		return openai.ChatCompletionMessage{}, openai.Usage{}, err
	case err != nil:
		return openai.ChatCompletionMessage{}, openai.Usage{}, bus.Permanent(err)
	case len(resp.Choices) == 0:
		return openai.ChatCompletionMessage{}, resp.Usage, ErrNoChoices
	}
	return resp.Choices[0].Message, resp.Usage, nil
}

// Text is the content of Reply's message.
func Text(ctx context.Context, m Chatter, session string, r Request) (string, error) {
	msg, _, err := Reply(ctx, m, session, r)
	return msg.Content, err
}
