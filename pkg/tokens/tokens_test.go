package tokens

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// Counters are expensive to build, so the tests share one per encoding.
var (
	sharedOnce sync.Once
	shared     map[string]*Counter
	sharedErr  error
)

func counter(t *testing.T, encoding string) *Counter {
	t.Helper()
	sharedOnce.Do(func() {
		shared = map[string]*Counter{}
		for _, name := range []string{EncodingO200K, EncodingCL100K} {
			c, err := newCounter(name)
			if err != nil {
				sharedErr = err
				return
			}
			shared[name] = c
		}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared[encoding]
}

func TestNewPrefersO200K(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if c.Encoding() != EncodingO200K {
		t.Fatalf("Encoding() = %q, want %q", c.Encoding(), EncodingO200K)
	}
}

func TestCountKnown(t *testing.T) {
	cases := []struct {
		encoding, text string
		want           int
	}{
		{EncodingCL100K, "hello world", 2},
		{EncodingCL100K, "tiktoken is great!", 6},
		{EncodingO200K, "hello world", 2},
		{EncodingO200K, "tiktoken is great!", 6},
		{EncodingCL100K, "", 0},
		{EncodingO200K, "", 0},
	}
	for _, tc := range cases {
		if got := counter(t, tc.encoding).Count(tc.text); got != tc.want {
			t.Errorf("%s Count(%q) = %d, want %d", tc.encoding, tc.text, got, tc.want)
		}
	}
}

func TestCountSpecialTokenTextDoesNotPanic(t *testing.T) {
	c := counter(t, EncodingCL100K)
	// As ordinary text the marker splits into several tokens; as a special
	// token it would be exactly one.
	if got := c.Count("<|endoftext|>"); got <= 1 {
		t.Fatalf("Count(<|endoftext|>) = %d, want it counted as ordinary text (> 1)", got)
	}
}

func TestCountMessages(t *testing.T) {
	c := counter(t, EncodingCL100K)
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You are a careful builder."},
		{Role: openai.ChatMessageRoleUser, Content: "hello world", Name: "ralph"},
		{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{
			ID: "call_1", Type: openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: "read_file", Arguments: `{"path":"main.go"}`},
		}}},
		{Role: openai.ChatMessageRoleTool, ToolCallID: "call_1", Content: "package main"},
	}
	sum := 0
	for _, m := range msgs {
		sum += c.Count(m.Content)
	}
	got := c.CountMessages(msgs)
	if got <= sum {
		t.Fatalf("CountMessages = %d, want more than the contents alone (%d)", got, sum)
	}

	// One message: 3 overhead + role + content + 3 reply priming.
	one := []openai.ChatCompletionMessage{{Role: "user", Content: "hello world"}}
	if got, want := c.CountMessages(one), 3+1+2+3; got != want {
		t.Errorf("CountMessages(one user message) = %d, want %d", got, want)
	}
	// A name costs its tokens plus one.
	named := []openai.ChatCompletionMessage{{Role: "user", Content: "hello world", Name: "ralph"}}
	if got, want := c.CountMessages(named), 3+1+2+c.Count("ralph")+1+3; got != want {
		t.Errorf("CountMessages(named) = %d, want %d", got, want)
	}
	// Tool call names and arguments count.
	withCall := c.CountMessages(msgs[2:3])
	if min := 3 + 1 + c.Count("read_file") + c.Count(`{"path":"main.go"}`) + 3; withCall < min {
		t.Errorf("CountMessages(tool call) = %d, want at least %d", withCall, min)
	}
	if got := c.CountMessages(nil); got != 0 {
		t.Errorf("CountMessages(nil) = %d, want 0", got)
	}
}

func TestConcurrentCount(t *testing.T) {
	c := counter(t, EncodingO200K)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if got := c.Count("hello world"); got != 2 {
					t.Errorf("Count = %d, want 2", got)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestNoNetwork builds a Counter in a fresh process (tiktoken caches loaded
// encodings process-wide, so this process proves nothing) with every route
// to the vocabulary files blocked: an empty tiktoken cache directory, an
// unreachable proxy, and an http.DefaultTransport that fails the test.
func TestNoNetwork(t *testing.T) {
	if os.Getenv("TOKENS_OFFLINE_CHILD") == "1" {
		t.Skip("parent-only test")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOfflineChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(),
		"TOKENS_OFFLINE_CHILD=1",
		"TIKTOKEN_CACHE_DIR="+t.TempDir(),
		"HTTP_PROXY=http://127.0.0.1:1",
		"HTTPS_PROXY=http://127.0.0.1:1",
		"NO_PROXY=",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("offline child failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestOfflineChild") {
		t.Fatalf("offline child did not run:\n%s", out)
	}
}

type noNetwork struct{ t *testing.T }

func (n noNetwork) RoundTrip(r *http.Request) (*http.Response, error) {
	n.t.Errorf("tokenizer used the network: %s %s", r.Method, r.URL)
	return nil, errors.New("network disabled in test")
}

func TestOfflineChild(t *testing.T) {
	if os.Getenv("TOKENS_OFFLINE_CHILD") != "1" {
		t.Skip("run by TestNoNetwork in a fresh process")
	}
	http.DefaultTransport = noNetwork{t}
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Count("hello world"); got != 2 {
		t.Fatalf("Count(hello world) = %d, want 2", got)
	}
	cl, err := newCounter(EncodingCL100K)
	if err != nil {
		t.Fatal(err)
	}
	if got := cl.Count("hello world"); got != 2 {
		t.Fatalf("cl100k Count(hello world) = %d, want 2", got)
	}
}

// A long text is counted once and then known: asked again, and after
// texts that differ from it only in their last character or in length,
// every answer is the tokenizer's own.
func TestCountOfAKnownTextIsTheTokenizers(t *testing.T) {
	c := counter(t, EncodingO200K)
	base := strings.Repeat("The builder reads pkg/tools/hash.go and runs go test ./... again. ", 20)
	texts := []string{
		base,
		base + "x",
		base[:len(base)-1] + "!",
		base[:len(base)-1] + "!!!!!!!!",
		strings.Repeat("a", cachedTextBytes),
		strings.Repeat("a", cachedTextBytes+1),
		strings.Repeat("ab", cachedTextBytes),
	}
	for round := 0; round < 2; round++ {
		for _, text := range texts {
			want := len(c.enc.EncodeOrdinary(text))
			if got := c.Count(text); got != want {
				t.Fatalf("round %d: Count(%d bytes ending %q) = %d, want %d", round, len(text), text[len(text)-3:], got, want)
			}
		}
	}
	if _, ok := c.known.Get(keyOf(base)); !ok {
		t.Fatal("the long text's count was not kept")
	}
	if _, ok := c.known.Get(keyOf("hello world")); ok {
		t.Fatal("a short text's count was kept")
	}
}

// BenchmarkCountSystemPrompt counts a system-prompt-sized text, as every
// task start does.
func BenchmarkCountSystemPrompt(b *testing.B) {
	c, err := newCounter(EncodingO200K)
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("You are the builder. Use the tools to change files and run commands. ", 40)
	for b.Loop() {
		c.Count(text)
	}
}
