package scriptllm

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"
)

// The types below are the OpenAI wire shapes scriptllm writes. They are
// declared here rather than borrowed from go-openai so that the server
// controls every byte the client sees (e.g. verbatim tool call arguments).

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usage        `json:"usage"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	FinishReason string          `json:"finish_reason"`
}

type responseMessage struct {
	Role      string         `json:"role"`
	Content   string         `json:"content"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelInfo `json:"data"`
}

type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

// estimateTokens is the usage estimate: one token per four characters
// (runes), rounded up. It is deliberately crude; it only has to be stable
// and roughly proportional so that token accounting code has numbers to
// work with.
func estimateTokens(chars int) int { return (chars + 3) / 4 }

func runeLen(s string) int { return utf8.RuneCountInString(s) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// The status line is already sent, so an encoding error can only mean
	// the client went away; there is nobody left to tell.
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes an OpenAI-format error, which go-openai turns into an
// *openai.APIError carrying the message and status.
func writeError(w http.ResponseWriter, status int, errType, message string) {
	writeJSON(w, status, errorBody{Error: errorDetail{Message: message, Type: errType, Code: status}})
}
