// Package tokens owns token counting for context accounting: how much of a
// model's context window a prompt or a conversation will use. Counts are an
// approximation (the served model may use another tokenizer), good enough to
// decide when to summarize or prune, not to bill.
package tokens

import (
	"fmt"
	"hash/maphash"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
	openai "github.com/sashabaranov/go-openai"
)

// Encoding names, in order of preference: o200k_base is the tokenizer of
// current OpenAI models and is embedded in the offline loader; cl100k_base is
// the fallback should it ever fail to load.
const (
	EncodingO200K  = "o200k_base"
	EncodingCL100K = "cl100k_base"
)

// Per-message overheads from OpenAI's "How to count tokens with tiktoken"
// recipe: every message is wrapped in <|start|>{role}\n...<|end|>\n, a name
// costs one extra token, and every reply is primed with <|start|>assistant.
const (
	tokensPerMessage = 3
	tokensPerName    = 1
	replyPriming     = 3
	// imagePartTokens is OpenAI's base cost of a low-detail image. The real
	// cost depends on the image size, which is unknown here; counting the
	// floor keeps images from looking free.
	imagePartTokens = 85
)

// loaderOnce installs the offline BPE loader. tiktoken-go's default loader
// downloads the vocabularies over HTTP, which the mesh must never do at run
// time; the offline loader reads the copies embedded in tiktoken-go-loader.
// It is done lazily, not in init, so importing the package has no side effect.
var loaderOnce sync.Once

func useOfflineLoader() {
	loaderOnce.Do(func() {
		tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	})
}

// Counter counts tokens with one BPE encoding. It is safe for concurrent use.
// Building one takes a few hundred milliseconds and tens of megabytes, so a
// process should build one and share it.
type Counter struct {
	enc   *tiktoken.Tiktoken
	name  string
	known *lru.Cache[textKey, int]
}

// The tokenizer is the dearest part of a step: the system prompt and a
// task's instructions are counted when a session starts, again when each
// task starts, for every session. Counts of texts of at least
// cachedTextBytes are kept, at most cachedTexts of them, keyed by two
// independent 64-bit hashes of the text under seeds of this process (a
// collision would need both to agree; the seeds are not known outside).
const (
	cachedTextBytes = 256
	cachedTexts     = 4096
)

var keySeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

type textKey struct {
	n    int
	a, b uint64
}

func keyOf(text string) textKey {
	return textKey{len(text), maphash.String(keySeeds[0], text), maphash.String(keySeeds[1], text)}
}

// New returns a Counter using o200k_base, or cl100k_base if o200k_base cannot
// be loaded. It never touches the network.
func New() (*Counter, error) {
	c, err := newCounter(EncodingO200K)
	if err == nil {
		return c, nil
	}
	c, err2 := newCounter(EncodingCL100K)
	if err2 != nil {
		return nil, fmt.Errorf("tokens: new counter: %w (fallback: %w)", err, err2)
	}
	return c, nil
}

func newCounter(encoding string) (*Counter, error) {
	useOfflineLoader()
	enc, err := tiktoken.GetEncoding(encoding)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", encoding, err)
	}
	known, err := lru.New[textKey, int](cachedTexts)
	if err != nil {
		return nil, err
	}
	return &Counter{enc: enc, name: encoding, known: known}, nil
}

// Encoding names the BPE encoding the Counter uses, for logs and metrics.
func (c *Counter) Encoding() string { return c.name }

// Count returns the number of tokens in text. Special-token markers such as
// "<|endoftext|>" in text are counted as ordinary text: they come from users
// and models, and must neither panic nor be undercounted.
func (c *Counter) Count(text string) int {
	if text == "" {
		return 0
	}
	if len(text) < cachedTextBytes {
		return len(c.enc.EncodeOrdinary(text))
	}
	k := keyOf(text)
	if n, ok := c.known.Get(k); ok {
		return n
	}
	n := len(c.enc.EncodeOrdinary(text))
	c.known.Add(k, n)
	return n
}

// CountMessages estimates the prompt tokens msgs will use as a chat
// completion request, following OpenAI's per-message overhead recipe: 3
// tokens per message plus its role, content, name, tool calls and tool call
// id, and 3 more for priming the reply. Tool and response-format schemas
// sent alongside the messages are not included.
func (c *Counter) CountMessages(msgs []openai.ChatCompletionMessage) int {
	if len(msgs) == 0 {
		return 0
	}
	n := replyPriming
	for _, m := range msgs {
		n += tokensPerMessage
		n += c.Count(m.Role)
		n += c.Count(m.Content)
		n += c.Count(m.Refusal)
		// Reasoning content is only sent back by some servers but, when it
		// is, it occupies the context like any other text.
		n += c.Count(m.ReasoningContent)
		for _, p := range m.MultiContent {
			n += c.Count(p.Text)
			if p.ImageURL != nil {
				n += imagePartTokens
			}
		}
		if m.Name != "" {
			n += c.Count(m.Name) + tokensPerName
		}
		if m.FunctionCall != nil {
			n += c.Count(m.FunctionCall.Name) + c.Count(m.FunctionCall.Arguments)
		}
		for _, tc := range m.ToolCalls {
			n += c.Count(tc.Function.Name) + c.Count(tc.Function.Arguments)
		}
		n += c.Count(m.ToolCallID)
	}
	return n
}
