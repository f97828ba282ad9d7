// Package bus owns Ralph mesh's use of NATS JetStream: connecting, stream
// bootstrap (the session stream and the dead-letter stream), publishing with
// deterministic message ids, the handler runner behind every service's
// durable pull consumers with the handler policy as middlewares (recover,
// heartbeat, give up) and the journal-once step, and reading a session back
// for replay.
package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/events"
	"github.com/ralphmesh/ralph/pkg/settings"
)

// ConnectOptions are the ways to reach and authenticate to NATS.
type ConnectOptions struct {
	URL  string
	Name string
	// InboxPrefix, when set, is where the client gets its replies
	// (nats.CustomInboxPrefix): a NATS user may then be allowed to
	// subscribe to its own replies only.
	InboxPrefix string
	User        string
	Password    string
	Token       string
	CredsFile   string
	NKeyFile    string
	TLSCert     string
	TLSKey      string
	TLSCA       string
}

// Connect dials NATS with the given options; it retries the initial connect
// briefly so a service started alongside its server does not die at once.
func Connect(o ConnectOptions, log *zap.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", zap.String("url", c.ConnectedUrl())) }),
		// What the server refuses (a permissions violation) goes to the
		// log, not to stderr.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			fields := []zap.Field{zap.Error(err)}
			if sub != nil {
				fields = append(fields, zap.String("subscription", sub.Subject))
			}
			log.Warn("nats error", fields...)
		}),
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NKeyFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey %s: %w", o.NKeyFile, err)
		}
		opts = append(opts, opt)
	}
	if o.TLSCert != "" || o.TLSKey != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		nc, err := nats.Connect(o.URL, opts...)
		if err == nil {
			return nc, nil
		}
		lastErr = err
		if errors.Is(err, nats.ErrAuthorization) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil, fmt.Errorf("connect to nats %s: %w", settings.MaskURL(o.URL), lastErr)
}

// StreamConfig shapes the session stream. Its tags are the one home of
// these defaults (RALPH_STREAM_*, through pkg/config).
type StreamConfig struct {
	// MaxAge is how long events are kept; zero keeps them until removed.
	MaxAge time.Duration `split_words:"true" default:"168h" desc:"how long session events are kept for replay"`
	// Replicas below 1 mean 1.
	Replicas int `split_words:"true" default:"1" desc:"stream replicas (3 on a NATS cluster)"`
	// DuplicateWindow is how long JetStream remembers message IDs to drop
	// a republished event; zero means the default.
	DuplicateWindow time.Duration `split_words:"true" default:"2m" desc:"how long a republished event (same id) is recognised and dropped"`
}

// Bus publishes and consumes session events under one subject prefix.
type Bus struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	prefix string
	log    *zap.Logger
	// team, when set, is the one team whose sessions the bus reads and
	// publishes (ForTeam); empty is every team.
	team string
}

// New wraps a connection.
func New(nc *nats.Conn, prefix string, log *zap.Logger) (*Bus, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return &Bus{nc: nc, js: js, prefix: prefix, log: log}, nil
}

// Prefix is the subject prefix.
func (b *Bus) Prefix() string { return b.prefix }

// ForTeam is the bus of one team: it follows, replays and looks up only
// that team's sessions (its filters name the team, which is what a NATS
// user limited to the team may ask for, docs/nats-permissions.md), and
// refuses to publish another team's events. It shares b's connection.
func (b *Bus) ForTeam(team string) (*Bus, error) {
	if err := events.ValidTeam(team); err != nil {
		return nil, err
	}
	c := *b
	c.team = team
	return &c, nil
}

// Team is the team the bus is limited to, "" for every team.
func (b *Bus) Team() string { return b.team }

// ErrOtherTeam is wrapped by Publish's error for an event of another team
// than a team's bus (ForTeam) is for.
var ErrOtherTeam = errors.New("the event belongs to another team")

// Conn is the underlying connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream exposes the JetStream context for tools that inspect streams.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Bootstrap creates or updates the session stream and the dead-letter
// stream. Both use limits retention so that every session can be replayed
// until MaxAge. A stream already configured as asked is left alone, so a
// client whose NATS user may look streams up but not manage them (every
// service's and `ralph run`'s, docs/nats-permissions.md) starts against
// streams an administrator created.
func (b *Bus) Bootstrap(ctx context.Context, c StreamConfig) error {
	d := settings.Defaults[StreamConfig]()
	if c.Replicas < 1 {
		c.Replicas = d.Replicas
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = d.DuplicateWindow
	}
	streams := []jetstream.StreamConfig{
		{
			Name:        events.StreamName(b.prefix),
			Description: "Ralph mesh session events",
			Subjects:    []string{events.AllSessions(b.prefix)},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      c.MaxAge,
			Replicas:    c.Replicas,
			Duplicates:  c.DuplicateWindow,
		},
		{
			Name:        events.DeadLetterStream(b.prefix),
			Description: "Ralph mesh events that failed permanently or too often",
			Subjects:    []string{events.DeadLetters(b.prefix)},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      c.MaxAge,
			Replicas:    c.Replicas,
			Duplicates:  c.DuplicateWindow,
		},
	}
	for _, sc := range streams {
		if s, err := b.js.Stream(ctx, sc.Name); err == nil && sameStream(s.CachedInfo().Config, sc) {
			continue
		}
		if err := b.createStream(ctx, sc); err != nil {
			return fmt.Errorf("bootstrap stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// sameStream reports whether a stream's configuration is what Bootstrap
// asks for in every field it sets.
func sameStream(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention && have.Storage == want.Storage && have.MaxAge == want.MaxAge &&
		have.Replicas == want.Replicas && have.Duplicates == want.Duplicates
}

// createStream retries briefly: a server that is still starting JetStream,
// electing a stream leader, or (nats-server 2.9) removing the store
// directory of the last deleted stream refuses a create for a moment. A
// user without permission to manage streams is told so at once: the
// server drops the request, which would otherwise end in a timeout.
func (b *Bus) createStream(ctx context.Context, sc jetstream.StreamConfig) error {
	var err error
	for attempt := 0; attempt < 6; attempt++ {
		if _, err = b.js.CreateOrUpdateStream(ctx, sc); err == nil {
			return nil
		}
		if last := b.nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), "$JS.API.STREAM.") {
			return fmt.Errorf("%w (this NATS user may not manage streams: an administrator creates them as configured, docs/nats-permissions.md)", last)
		}
		// A 4xx answer (bad config, name in use) will not change.
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code < 500 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
		}
	}
	return err
}

// ErrTooLarge is wrapped by Publish's error for an event larger than the
// server accepts (its max_payload).
var ErrTooLarge = errors.New("event larger than the server's max payload")

// MaxPayload is the largest message the server accepts, headers included:
// what every event must fit in.
func (b *Bus) MaxPayload() int64 { return b.nc.MaxPayload() }

// Publish sends env to its subject with env.ID as Nats-Msg-Id, so a
// redelivered step that publishes the same event again is a no-op.
//
// An event larger than the server's max payload is refused at once with a
// permanent error wrapping ErrTooLarge that names the event and both sizes:
// no redelivery makes it smaller, so retrying it would only hold the
// session up until the step is given up on.
func (b *Bus) Publish(ctx context.Context, env events.Envelope) error {
	if err := env.Validate(); err != nil {
		return fmt.Errorf("publish %s: %w", env.ID, err)
	}
	if b.team != "" && env.TeamOrDefault() != b.team {
		return Permanent(fmt.Errorf("publish %s: %w (%s, this bus is team %s's)", env.ID, ErrOtherTeam, env.TeamOrDefault(), b.team))
	}
	data := env.Marshal()
	if size, limit := MessageSize(env.ID, data), b.nc.MaxPayload(); limit > 0 && size > limit {
		return Permanent(fmt.Errorf("publish %s (%s): %w: %d bytes, the server accepts at most %d",
			env.ID, env.Type, ErrTooLarge, size, limit))
	}
	subj := events.Subject(b.prefix, env.TeamOrDefault(), env.Session, env.Type)
	if _, err := b.js.Publish(ctx, subj, data, jetstream.WithMsgID(env.ID)); err != nil {
		if d := b.denied(subj); d != nil {
			return Permanent(fmt.Errorf("publish %s to %s: %w (this NATS user may not publish it: docs/nats-permissions.md)", env.ID, subj, d))
		}
		if natsUnavailable(ctx, err) {
			err = Unavailable(err)
		}
		err = fmt.Errorf("publish %s to %s: %w", env.ID, subj, err)
		if errors.Is(err, nats.ErrMaxPayload) {
			// The server's limit changed under us, or the estimate of the
			// headers was short: just as permanent.
			return Permanent(fmt.Errorf("%w: %w", ErrTooLarge, err))
		}
		return err
	}
	return nil
}

// denied is the permissions violation the server reported for subject
// (an API subject's start will do), when that is why a request got no
// answer: the server drops what a user may not publish, so the client
// would otherwise see a timeout and take the server for away.
func (b *Bus) denied(subject string) error {
	if last := b.nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), subject) {
		return last
	}
	return nil
}

// MessageSize is what publishing data with the message id id costs against
// the server's max payload: the data and the header block that carries
// Nats-Msg-Id ("NATS/1.0\r\nNats-Msg-Id: <id>\r\n\r\n").
func MessageSize(id string, data []byte) int64 {
	const header = len("NATS/1.0\r\n") + len(nats.MsgIdHdr+": ") + len("\r\n") + len("\r\n")
	return int64(len(data) + header + len(id))
}

// natsUnavailable reports whether a JetStream request failed because the
// server is away (restarting, reconnecting, no stream leader yet) rather
// than because of the request: the same request succeeds once it is back.
// An error after ctx ended is the caller's doing, not an outage.
func natsUnavailable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		(errors.As(err, &apiErr) && apiErr.Code == 503)
}
