// Package bus owns Ralph mesh's use of NATS JetStream: connecting, stream
// bootstrap (the session stream and the dead-letter stream), publishing with
// deterministic message ids, the handler runner behind every service's
// durable pull consumers, and reading a session back for replay.
package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/ralphmesh/ralph/pkg/events"
)

// ConnectOptions are the ways to reach and authenticate to NATS.
type ConnectOptions struct {
	URL       string
	Name      string
	User      string
	Password  string
	Token     string
	CredsFile string
	NKeyFile  string
	TLSCert   string
	TLSKey    string
	TLSCA     string
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
	return nil, fmt.Errorf("connect to nats %s: %w", o.URL, lastErr)
}

// StreamConfig shapes the session stream.
type StreamConfig struct {
	MaxAge          time.Duration
	Replicas        int
	DuplicateWindow time.Duration
}

// Bus publishes and consumes session events under one subject prefix.
type Bus struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	prefix string
	log    *zap.Logger
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

// Conn is the underlying connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream exposes the JetStream context for tools that inspect streams.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Bootstrap creates or updates the session stream and the dead-letter
// stream. Both use limits retention so that every session can be replayed
// until MaxAge.
func (b *Bus) Bootstrap(ctx context.Context, c StreamConfig) error {
	if c.Replicas < 1 {
		c.Replicas = 1
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = 2 * time.Minute
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
			Subjects:    []string{b.prefix + ".dlq.>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      c.MaxAge,
			Replicas:    c.Replicas,
			Duplicates:  c.DuplicateWindow,
		},
	}
	for _, sc := range streams {
		if err := b.createStream(ctx, sc); err != nil {
			return fmt.Errorf("bootstrap stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// createStream retries briefly: a server that is still starting JetStream,
// electing a stream leader, or (nats-server 2.9) removing the store
// directory of the last deleted stream refuses a create for a moment.
func (b *Bus) createStream(ctx context.Context, sc jetstream.StreamConfig) error {
	var err error
	for attempt := 0; attempt < 6; attempt++ {
		if _, err = b.js.CreateOrUpdateStream(ctx, sc); err == nil {
			return nil
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

// Publish sends env to its subject with env.ID as Nats-Msg-Id, so a
// redelivered step that publishes the same event again is a no-op.
func (b *Bus) Publish(ctx context.Context, env events.Envelope) error {
	if err := env.Validate(); err != nil {
		return fmt.Errorf("publish %s: %w", env.ID, err)
	}
	subj := events.Subject(b.prefix, env.Session, env.Type)
	if _, err := b.js.Publish(ctx, subj, env.Marshal(), jetstream.WithMsgID(env.ID)); err != nil {
		return fmt.Errorf("publish %s to %s: %w", env.ID, subj, err)
	}
	return nil
}

// ErrNoSession is returned by Replay for a session with no events.
var ErrNoSession = errors.New("no events for session")

// Replay calls fn with every event of session in stream order and returns
// when it has seen the last one stored at the time of the call.
func (b *Bus) Replay(ctx context.Context, session string, fn func(events.Envelope) error) error {
	if err := events.ValidSession(session); err != nil {
		return err
	}
	exists, err := b.SessionExists(ctx, session)
	if err != nil {
		return fmt.Errorf("replay %s: %w", session, err)
	}
	if !exists {
		return fmt.Errorf("replay %s: %w", session, ErrNoSession)
	}
	return b.follow(ctx, events.SessionFilter(b.prefix, session), jetstream.DeliverAllPolicy, func(env events.Envelope, pending uint64) (bool, error) {
		return pending == 0, fn(env)
	})
}

// SessionExists reports whether the stream holds any event of session.
func (b *Bus) SessionExists(ctx context.Context, session string) (bool, error) {
	stream, err := b.js.Stream(ctx, events.StreamName(b.prefix))
	if err != nil {
		return false, fmt.Errorf("stream: %w", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(events.SessionFilter(b.prefix, session)))
	if err != nil {
		return false, fmt.Errorf("stream info: %w", err)
	}
	return len(info.State.Subjects) > 0, nil
}

// Follow calls fn with every event of session from the first one on, live,
// until fn says stop, fn fails or ctx ends.
func (b *Bus) Follow(ctx context.Context, session string, fn func(events.Envelope) (stop bool, err error)) error {
	if err := events.ValidSession(session); err != nil {
		return err
	}
	return b.follow(ctx, events.SessionFilter(b.prefix, session), jetstream.DeliverAllPolicy,
		func(env events.Envelope, _ uint64) (bool, error) { return fn(env) })
}

// Watch calls fn with every new event of every session until ctx ends.
func (b *Bus) Watch(ctx context.Context, fn func(events.Envelope)) error {
	err := b.follow(ctx, events.AllSessions(b.prefix), jetstream.DeliverNewPolicy,
		func(env events.Envelope, _ uint64) (bool, error) { fn(env); return false, nil })
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func (b *Bus) follow(ctx context.Context, filter string, deliver jetstream.DeliverPolicy, fn func(events.Envelope, uint64) (bool, error)) error {
	cons, err := b.js.OrderedConsumer(ctx, events.StreamName(b.prefix), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  deliver,
	})
	if err != nil {
		return fmt.Errorf("follow %s: consumer: %w", filter, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			continue
		}
		if err != nil {
			return fmt.Errorf("follow %s: %w", filter, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("follow %s: metadata: %w", filter, err)
		}
		env, err := events.Decode(msg.Data())
		if err != nil {
			b.log.Warn("skipping undecodable event", zap.String("subject", msg.Subject()), zap.Error(err))
			if meta.NumPending == 0 {
				return nil
			}
			continue
		}
		stop, err := fn(env, meta.NumPending)
		if err != nil || stop {
			return err
		}
	}
}
