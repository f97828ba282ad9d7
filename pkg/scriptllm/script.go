// Package scriptllm owns Ralph's scripted stand-in for an LLM: a real HTTP
// server speaking the OpenAI chat-completions protocol whose answers come
// from a script of rules instead of a model. Integration tests and
// `ralph demo` point the ordinary OpenAI client at it, so the whole client
// path (HTTP, JSON, tool calls, error handling, retries) is exercised
// deterministically and without network access or API keys.
//
// A script is an ordered list of rules. Each request is answered by the first
// rule whose conditions all hold; a rule answers either with an assistant
// message (text and/or tool calls) or with an HTTP error. See Script for the
// file format.
package scriptllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Script is the decoded form of a script file. In YAML:
//
//	rules:
//	  - name: plan
//	    model: test-model          # optional exact match on the request model
//	    when:
//	      turn: 1                  # assistant messages in the request + 1
//	      first_user_contains: "build"
//	    delay: 150ms
//	    reply:
//	      content: "Let me look."
//	      tool_calls:
//	        - name: read_file
//	          arguments: {path: "README.md"}   # object: sent JSON-encoded
//	        - name: broken
//	          arguments: '{"path": '          # string: sent verbatim
//	  - name: rate-limited
//	    times: 1
//	    error: {status: 429, message: "slow down", retry_after: 2}
//	  - name: broken-proxy
//	    times: 1
//	    raw: {body: "<html>Bad gateway</html>", content_type: text/html}
//	  - name: done
//	    reply: {content: "All done."}
type Script struct {
	Rules []Rule `yaml:"rules" json:"rules"`
}

// Rule is one scripted answer and the conditions under which it is given.
type Rule struct {
	// Name labels the rule in errors, in Recorded and for Server.Hits.
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// Model, when set, must equal the request's model exactly.
	Model string `yaml:"model,omitempty" json:"model,omitempty"`
	// When holds conditions on the request messages; all set ones must hold.
	When Match `yaml:"when,omitempty" json:"when,omitempty"`
	// Times limits how many requests the rule answers (0 = unlimited). Once
	// used up the rule is skipped, so a later rule can take over; this is how
	// "fail twice, then succeed" scenarios are written.
	Times int `yaml:"times,omitempty" json:"times,omitempty"`
	// Delay is waited before answering, to exercise client timeouts and
	// progress reporting. The wait ends early if the client gives up.
	Delay Duration `yaml:"delay,omitempty" json:"delay,omitempty"`
	// Error makes the rule answer with an HTTP error. Exactly one of
	// Error, Reply and Raw must be set.
	Error *ErrorReply `yaml:"error,omitempty" json:"error,omitempty"`
	// Raw makes the rule answer with a body of its own, sent as it is:
	// what a broken proxy or a server cut short sends (an HTML page or
	// truncated JSON with status 200), so a client's handling of replies
	// that are not a completion can be tested.
	Raw *RawReply `yaml:"raw,omitempty" json:"raw,omitempty"`
	// Reply makes the rule answer with an assistant message.
	Reply *Reply `yaml:"reply,omitempty" json:"reply,omitempty"`
}

// Match lists conditions on a request. Zero-valued fields are ignored, so
// the zero Match matches every request. "Content" means a message's text:
// the string content, or the concatenated text parts of array content; tool
// call arguments of assistant messages are not part of it.
type Match struct {
	// Turn is the number of assistant messages in the request plus one, so
	// the first call of a conversation is turn 1. 0 matches any turn.
	Turn int `yaml:"turn,omitempty" json:"turn,omitempty"`
	// FirstUserContains must be a substring of the first user message.
	FirstUserContains string `yaml:"first_user_contains,omitempty" json:"first_user_contains,omitempty"`
	// LastContains must be a substring of the last message.
	LastContains string `yaml:"last_contains,omitempty" json:"last_contains,omitempty"`
	// LastRole must equal the role of the last message (user, assistant,
	// tool, system, developer, function).
	LastRole string `yaml:"last_role,omitempty" json:"last_role,omitempty"`
	// AnyContains must be a substring of at least one message.
	AnyContains string `yaml:"any_contains,omitempty" json:"any_contains,omitempty"`
	// NotContains must not be a substring of any message.
	NotContains string `yaml:"not_contains,omitempty" json:"not_contains,omitempty"`
	// SystemContains must be a substring of at least one system (or
	// developer) message.
	SystemContains string `yaml:"system_contains,omitempty" json:"system_contains,omitempty"`
}

// ErrorReply is an HTTP error answer in the OpenAI error format.
type ErrorReply struct {
	// Status is the HTTP status code, 400..599.
	Status int `yaml:"status" json:"status"`
	// Message is the error message; empty means the status text.
	Message string `yaml:"message,omitempty" json:"message,omitempty"`
	// RetryAfter, in seconds, sets the Retry-After header when > 0, so
	// client back-off logic can be tested.
	RetryAfter int `yaml:"retry_after,omitempty" json:"retry_after,omitempty"`
}

// RawReply is an answer sent byte for byte.
type RawReply struct {
	// Status is the HTTP status; 0 means 200.
	Status int `yaml:"status,omitempty" json:"status,omitempty"`
	// ContentType is the Content-Type header; empty means
	// application/json, which is what a truncated completion claims.
	ContentType string `yaml:"content_type,omitempty" json:"content_type,omitempty"`
	// Body is sent as it is.
	Body string `yaml:"body" json:"body"`
}

// Reply is an assistant message answer.
type Reply struct {
	Content   string     `yaml:"content,omitempty" json:"content,omitempty"`
	ToolCalls []ToolCall `yaml:"tool_calls,omitempty" json:"tool_calls,omitempty"`
	// FinishReason overrides the default: "tool_calls" when there are tool
	// calls, else "stop".
	FinishReason string `yaml:"finish_reason,omitempty" json:"finish_reason,omitempty"`
}

// ToolCall is one function call in a Reply.
type ToolCall struct {
	Name string `yaml:"name" json:"name"`
	// Arguments become the function arguments string. A string is sent
	// verbatim, which lets scripts send arguments that are not valid JSON;
	// any other value (object, array, number, bool) is JSON-encoded; nil is
	// sent as "{}" because a call without arguments still needs an object.
	Arguments any `yaml:"arguments,omitempty" json:"arguments,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("150ms",
// "2s") in YAML and JSON, because bare integers would leave the unit
// ambiguous.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalYAML reads a duration string such as "150ms".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: duration must be a string such as \"150ms\"", n.Line)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: parse duration %q: %w", n.Line, n.Value, err)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON reads a duration string such as "150ms".
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"150ms\", got %s", data)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("parse duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// LoadScript reads and parses the script file at path; the format is chosen
// by its extension (.json, else YAML).
func LoadScript(path string) (Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Script{}, fmt.Errorf("load script %s: %w", path, err)
	}
	s, err := ParseScript(data, filepath.Ext(path))
	if err != nil {
		return Script{}, fmt.Errorf("load script %s: %w", path, err)
	}
	return s, nil
}

// ParseScript decodes and validates a script. ext selects the format:
// ".json"/"json" is JSON; ".yaml", ".yml", their dotless forms and "" are
// YAML. Decoding is strict: unknown fields are errors, because a misspelt
// condition would otherwise silently match everything.
func ParseScript(data []byte, ext string) (Script, error) {
	var s Script
	format := strings.ToLower(strings.TrimPrefix(ext, "."))
	switch format {
	case "json":
		if err := decodeJSON(data, &s); err != nil {
			return Script{}, fmt.Errorf("parse script (json): %w", err)
		}
	case "yaml", "yml", "":
		if err := decodeYAML(data, &s); err != nil {
			return Script{}, fmt.Errorf("parse script (yaml): %w", err)
		}
	default:
		return Script{}, fmt.Errorf("parse script: unsupported extension %q (want .yaml, .yml or .json)", ext)
	}
	// An empty rule list can only come from a mistake in a file (wrong
	// top-level key, empty file); every request would then fail with 422.
	if len(s.Rules) == 0 {
		return Script{}, errors.New("parse script: field rules: at least one rule is required")
	}
	if err := s.Validate(); err != nil {
		return Script{}, fmt.Errorf("parse script: %w", err)
	}
	return s, nil
}

func decodeYAML(data []byte, s *Script) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(s); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty document")
		}
		return err
	}
	// A second document would be silently ignored otherwise.
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	return nil
}

func decodeJSON(data []byte, s *Script) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	// Numbers in tool call arguments are re-encoded; UseNumber keeps them
	// exactly as written instead of rounding through float64.
	dec.UseNumber()
	if err := dec.Decode(s); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty document")
		}
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON document")
	}
	return nil
}

// Validate checks every rule and returns the first problem, naming the
// rule's index (0-based, as in Recorded.RuleIndex) and field. A Script
// decoded by ParseScript is already valid; scripts built in Go code are
// validated by Server.Start.
func (s Script) Validate() error {
	_, err := compile(s)
	return err
}

// compiledRule is a validated rule with its tool call arguments already
// encoded, so encoding can fail only at validation time, never mid-request.
type compiledRule struct {
	Rule
	arguments []string
}

var knownRoles = map[string]bool{
	"user": true, "assistant": true, "tool": true, "system": true, "developer": true, "function": true,
}

var knownFinishReasons = map[string]bool{
	"stop": true, "length": true, "tool_calls": true, "content_filter": true, "function_call": true,
}

func compile(s Script) ([]compiledRule, error) {
	out := make([]compiledRule, 0, len(s.Rules))
	for i, r := range s.Rules {
		c, err := compileRule(r)
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("field %s: %s", field, fmt.Sprintf(format, args...))
}

func compileRule(r Rule) (compiledRule, error) {
	c := compiledRule{Rule: r}
	set := 0
	for _, isSet := range []bool{r.Reply != nil, r.Error != nil, r.Raw != nil} {
		if isSet {
			set++
		}
	}
	switch {
	case set == 0:
		return c, fieldErr("reply", "one of reply, error or raw is required")
	case set > 1:
		return c, fieldErr("error", "only one of reply, error or raw may be set")
	}
	if r.Times < 0 {
		return c, fieldErr("times", "must be >= 0, got %d", r.Times)
	}
	if r.Delay < 0 {
		return c, fieldErr("delay", "must be >= 0, got %s", r.Delay)
	}
	if r.When.Turn < 0 {
		return c, fieldErr("when.turn", "must be >= 0, got %d", r.When.Turn)
	}
	if r.When.LastRole != "" && !knownRoles[r.When.LastRole] {
		return c, fieldErr("when.last_role", "unknown role %q (want user, assistant, tool, system, developer or function)", r.When.LastRole)
	}
	if e := r.Error; e != nil {
		if e.Status < 400 || e.Status > 599 {
			return c, fieldErr("error.status", "must be an HTTP error status 400..599, got %d", e.Status)
		}
		if e.RetryAfter < 0 {
			return c, fieldErr("error.retry_after", "must be >= 0 seconds, got %d", e.RetryAfter)
		}
		return c, nil
	}
	if raw := r.Raw; raw != nil {
		if raw.Status != 0 && (raw.Status < 200 || raw.Status > 599) {
			return c, fieldErr("raw.status", "must be an HTTP status 200..599, got %d", raw.Status)
		}
		return c, nil
	}
	if fr := r.Reply.FinishReason; fr != "" && !knownFinishReasons[fr] {
		return c, fieldErr("reply.finish_reason", "unknown finish reason %q", fr)
	}
	for j, tc := range r.Reply.ToolCalls {
		if tc.Name == "" {
			return c, fieldErr(fmt.Sprintf("reply.tool_calls[%d].name", j), "is required")
		}
		args, err := encodeArguments(tc.Arguments)
		if err != nil {
			return c, fmt.Errorf("field reply.tool_calls[%d].arguments: %w", j, err)
		}
		c.arguments = append(c.arguments, args)
	}
	return c, nil
}

func encodeArguments(v any) (string, error) {
	switch a := v.(type) {
	case nil:
		return "{}", nil
	case string:
		return a, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode as JSON: %w", err)
	}
	return string(b), nil
}
