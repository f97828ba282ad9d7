package scriptllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Message is a request message reduced to what rules match on and what
// tests assert on.
type Message struct {
	Role string
	// Content is the string content, or the concatenated text parts when the
	// request used the array-of-parts form.
	Content    string
	Name       string
	ToolCallID string
}

// chatRequest holds the request fields scriptllm reads. Unknown fields are
// accepted because real clients send many options the script ignores.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []wireMessage `json:"messages"`
	Stream   bool          `json:"stream"`
	// MaxCompletionTokens is recorded for tests that check the limit a
	// client sends; the scripted reply does not depend on it.
	MaxCompletionTokens int `json:"max_completion_tokens"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCallID string          `json:"tool_call_id"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// parsedRequest is a decoded request plus the values derived for matching.
type parsedRequest struct {
	Model               string
	Stream              bool
	Messages            []Message
	Turn                int
	MaxCompletionTokens int
}

func parseRequest(body []byte) (parsedRequest, error) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return parsedRequest{}, fmt.Errorf("decode request body as JSON: %w", err)
	}
	p := parsedRequest{Model: req.Model, Stream: req.Stream, Turn: 1, MaxCompletionTokens: req.MaxCompletionTokens}
	for i, m := range req.Messages {
		content, err := decodeContent(m.Content)
		if err != nil {
			return parsedRequest{}, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		p.Messages = append(p.Messages, Message{Role: m.Role, Content: content, Name: m.Name, ToolCallID: m.ToolCallID})
		if m.Role == "assistant" {
			p.Turn++
		}
	}
	return p, nil
}

// decodeContent accepts both content forms of the chat API: a string (or
// null, as assistant messages with only tool calls send) and an array of
// parts, of which only the text parts carry matchable content.
func decodeContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("decode string content: %w", err)
		}
		return s, nil
	case '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", fmt.Errorf("decode content parts: %w", err)
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" {
				b.WriteString(p.Text)
			}
		}
		return b.String(), nil
	}
	return "", errors.New("must be a string, null or an array of content parts")
}

// matches reports whether every condition of r holds for req.
func (r Rule) matches(req parsedRequest) bool {
	if r.Model != "" && r.Model != req.Model {
		return false
	}
	w := r.When
	if w.Turn != 0 && w.Turn != req.Turn {
		return false
	}
	msgs := req.Messages
	var last Message
	if len(msgs) > 0 {
		last = msgs[len(msgs)-1]
	}
	if w.LastRole != "" && (len(msgs) == 0 || last.Role != w.LastRole) {
		return false
	}
	if w.LastContains != "" && (len(msgs) == 0 || !strings.Contains(last.Content, w.LastContains)) {
		return false
	}
	if w.FirstUserContains != "" {
		first, ok := firstWithRole(msgs, "user")
		if !ok || !strings.Contains(first.Content, w.FirstUserContains) {
			return false
		}
	}
	if w.AnyContains != "" && !anyContains(msgs, w.AnyContains, nil) {
		return false
	}
	if w.NotContains != "" && anyContains(msgs, w.NotContains, nil) {
		return false
	}
	if w.SystemContains != "" && !anyContains(msgs, w.SystemContains, isSystemRole) {
		return false
	}
	return true
}

func firstWithRole(msgs []Message, role string) (Message, bool) {
	for _, m := range msgs {
		if m.Role == role {
			return m, true
		}
	}
	return Message{}, false
}

// isSystemRole treats "developer" as system because newer OpenAI clients
// send system prompts under that role.
func isSystemRole(role string) bool { return role == "system" || role == "developer" }

func anyContains(msgs []Message, sub string, role func(string) bool) bool {
	for _, m := range msgs {
		if (role == nil || role(m.Role)) && strings.Contains(m.Content, sub) {
			return true
		}
	}
	return false
}
