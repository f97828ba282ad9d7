// Package llm owns talking to OpenAI-compatible endpoints, one client per
// role. It retries what a retry can fix (rate limits, server errors, dropped
// connections), records token usage per session, and tells services through
// ErrRetryable whether a failed call should be redelivered later or
// dead-lettered. Reply (reply.go) is the call as event handlers make it:
// errors sorted the way the bus runner acts on them, a reply without
// choices refused.
package llm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/bus"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// Role names what a client is used for. Each role may be served by its own
// endpoint and model, and usage is accounted per role.
type Role string

// Roles of the mesh.
const (
	RoleBuilder    Role = "builder"
	RoleCritic     Role = "critic"
	RoleSummarizer Role = "summarizer"
	RolePruner     Role = "pruner"
	RoleDecomposer Role = "decomposer"
)

// initialBackoff is the first wait between attempts when the server does not
// say how long to wait; it doubles with every attempt.
const initialBackoff = 250 * time.Millisecond

// usageTimeout bounds recording usage, which happens after the completion
// and must not hold up the caller for long.
const usageTimeout = 5 * time.Second

// Endpoint is where and how a role's requests are sent.
type Endpoint struct {
	// BaseURL is the API root including the version, e.g.
	// http://127.0.0.1:8080/v1; /chat/completions is appended.
	BaseURL string
	// APIKey is sent as a bearer token. Empty omits the Authorization
	// header, which local servers do not need.
	APIKey string
	// Model is sent when a request names none.
	Model string
	// Timeout bounds each attempt of a Chat call: sending the request and
	// reading the reply. Waits between attempts come on top. Zero or
	// negative means Config's default.
	Timeout time.Duration
	// MaxRetries is how many extra attempts a retryable failure without
	// Retry-After gets. Zero means Config's default; negative disables
	// retries, Retry-After or not.
	MaxRetries int
	// MaxBackoff caps the client's own wait between attempts. Zero or
	// negative means Config's default.
	MaxBackoff time.Duration
	// MaxRetryWait bounds the waits a server asks for with Retry-After,
	// added up over one call; past it the call fails, not retryable. Zero
	// or negative means Config's default.
	MaxRetryWait time.Duration
	// Concurrency is how many calls the client makes at once: the events
	// its service handles at once (RALPH_STREAM_CONCURRENCY). That many
	// connections to the endpoint are kept alive between calls, so no
	// call waits for a new connection (the standard transport keeps two).
	// Zero or negative means the stream's default.
	Concurrency int
}

// withDefaults returns ep with zero fields replaced by Config's defaults.
func (ep Endpoint) withDefaults() Endpoint {
	d := DefaultConfig()
	if ep.Timeout <= 0 {
		ep.Timeout = d.Timeout
	}
	switch {
	case ep.MaxRetries == 0:
		ep.MaxRetries = d.MaxRetries
	case ep.MaxRetries < 0:
		ep.MaxRetries = 0
	}
	if ep.MaxBackoff <= 0 {
		ep.MaxBackoff = d.MaxBackoff
	}
	if ep.MaxRetryWait <= 0 {
		ep.MaxRetryWait = d.MaxRetryWait
	}
	if ep.Concurrency <= 0 {
		ep.Concurrency = settings.Defaults[bus.RunOptions]().Concurrency
	}
	return ep
}

// UsageRecorder receives the tokens each completion consumed, so that
// sessions can be budgeted and billed.
type UsageRecorder interface {
	RecordUsage(ctx context.Context, session string, role Role, in, out int) error
}

// ErrRetryable is wrapped by errors that a later attempt may fix: rate
// limits (429), server errors (5xx), timeouts and connection failures, once
// the client's own retries are exhausted. Services should redeliver the
// message with a delay rather than dead-letter it. Errors a retry cannot fix
// (400, 401, 403, 404, 422, malformed requests) do not wrap it.
var ErrRetryable = errors.New("llm: retryable error")

// IsRetryable reports whether err wraps ErrRetryable.
func IsRetryable(err error) bool { return errors.Is(err, ErrRetryable) }

// retryableError marks err as retryable without changing its message.
type retryableError struct{ err error }

func (e *retryableError) Error() string   { return e.err.Error() }
func (e *retryableError) Unwrap() []error { return []error{e.err, ErrRetryable} }

// Client is a chat completion client for one role. It is safe for
// concurrent use.
type Client struct {
	role      Role
	ep        Endpoint
	api       *openai.Client
	transport *retryTransport
	usage     UsageRecorder
	log       *zap.Logger
}

// New returns a client for role that sends requests to ep. usage may be nil
// to skip usage accounting; log may be nil to discard logs.
func New(role Role, ep Endpoint, usage UsageRecorder, log *zap.Logger) (*Client, error) {
	if role == "" {
		return nil, errors.New("llm: new client: role is empty")
	}
	if ep.BaseURL == "" {
		return nil, fmt.Errorf("llm %s: new client: endpoint BaseURL is empty", role)
	}
	if err := checkBaseURL(role, ep.BaseURL); err != nil {
		return nil, err
	}
	if ep.Model == "" {
		return nil, fmt.Errorf("llm %s: new client: endpoint Model is empty", role)
	}
	ep = ep.withDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("llm_role", string(role)), zap.String("model", ep.Model))

	rt := &retryTransport{
		next:         baseTransport(ep.Concurrency),
		maxRetries:   ep.MaxRetries,
		maxBackoff:   ep.MaxBackoff,
		maxRetryWait: ep.MaxRetryWait,
		timeout:      ep.Timeout,
		initial:      initialBackoff,
		log:          log,
		sleep:        sleep,
	}
	cfg := openai.DefaultConfig(ep.APIKey)
	cfg.BaseURL = ep.BaseURL
	// No http.Client timeout: the transport bounds each attempt, reply
	// included, and a client timeout would also bound the waits between
	// attempts.
	cfg.HTTPClient = &http.Client{Transport: rt}

	return &Client{
		role:      role,
		ep:        ep,
		api:       openai.NewClientWithConfig(cfg),
		transport: rt,
		usage:     usage,
		log:       log,
	}, nil
}

// baseTransport returns a private copy of the default transport, so that
// connection pools are per client and nothing else in the process can change
// this client's transport settings, keeping alive a connection for each of
// the calls made at once (the default keeps two per host, so a busy
// service opened a new connection for a quarter of its calls).
func baseTransport(concurrency int) http.RoundTripper {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return http.DefaultTransport
	}
	t = t.Clone()
	t.MaxIdleConnsPerHost = concurrency
	t.MaxIdleConns = max(t.MaxIdleConns, concurrency)
	return t
}

// Model returns the model sent when a request names none.
func (c *Client) Model() string { return c.ep.Model }

// Role returns the role the client serves.
func (c *Client) Role() Role { return c.role }

// Chat makes one chat completion call (non-streaming), each attempt bounded
// by Endpoint.Timeout (default 120s), and records usage for the session.
// req.Model is set to the endpoint's model when empty. Failures a later
// attempt may fix wrap ErrRetryable; a reply that is not a completion
// (ErrMalformedReply) is one of them.
func (c *Client) Chat(ctx context.Context, session string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	if req.Model == "" {
		req.Model = c.ep.Model
	}
	start := time.Now()
	resp, err := c.api.CreateChatCompletion(withSession(ctx, session), req)
	if err != nil {
		if retryable(err) {
			err = &retryableError{err}
		}
		c.log.Debug("chat completion failed", zap.String("session", session),
			zap.Duration("elapsed", time.Since(start)), zap.Error(err))
		return openai.ChatCompletionResponse{}, fmt.Errorf("llm %s: chat completion: %w", c.role, err)
	}

	in, out := resp.Usage.PromptTokens, resp.Usage.CompletionTokens
	c.log.Debug("chat completion", zap.String("session", session),
		zap.Duration("elapsed", time.Since(start)), zap.Int("tokens_in", in), zap.Int("tokens_out", out))
	if c.usage != nil {
		// The tokens are spent whether or not the caller is still waiting,
		// so record them even if ctx was cancelled just after the reply.
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), usageTimeout)
		defer ucancel()
		if err := c.usage.RecordUsage(uctx, session, c.role, in, out); err != nil {
			// Failing the call would make the service redo a completion that
			// was already paid for; losing one usage record is cheaper.
			c.log.Warn("llm: record usage", zap.String("session", session),
				zap.Int("tokens_in", in), zap.Int("tokens_out", out), zap.Error(err))
		}
	}
	return resp, nil
}

// retryable reports whether a later attempt may succeed where err failed.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrRetryable) || errors.Is(err, ErrMalformedReply) {
		return true
	}
	if errors.Is(err, ErrRetryWaitExhausted) {
		return false
	}
	if code := statusCode(err); code != 0 {
		return retryableStatus(code)
	}
	// A timeout is the server being slow; a cancellation is the caller
	// shutting down. Neither says anything about the request itself.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	return retryableTransportErr(err)
}

// statusCode returns the HTTP status go-openai attached to err, or 0.
func statusCode(err error) int {
	// RequestError is checked first because it may wrap an APIError whose
	// status was never filled in.
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) && reqErr.HTTPStatusCode != 0 {
		return reqErr.HTTPStatusCode
	}
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) && apiErr.HTTPStatusCode != 0 {
		return apiErr.HTTPStatusCode
	}
	return 0
}

// retryableStatus reports whether a response with status code may succeed
// if sent again: rate limits and server errors. Other 4xx mean the request
// itself is wrong and will fail the same way every time.
func retryableStatus(code int) bool {
	return code == http.StatusTooManyRequests || code >= 500
}

// retryableTransportErr reports whether err is a connection-level failure
// (refused, reset, dropped mid-response, network timeout) rather than one
// that would recur, such as an invalid URL or an untrusted certificate.
func retryableTransportErr(err error) bool {
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr)
}
