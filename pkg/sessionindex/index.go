// Package sessionindex owns the session index: one entry per session (its
// team, state, current task, iterations, tokens, tasks, model usage, start
// and last change) in a JetStream key-value bucket, written by the builder
// as sessions move and read by `ralph sessions`, `ralph status` and the
// console's HTTP API; and each team's tokens of the day, which the team
// limits read when a session starts.
//
// Why a KV bucket and not Redis: its keys are <team>.<session>, NATS
// subjects under $KV.<bucket>., so the same NATS permissions that keep a
// team's users to their team's events keep them to their team's entries
// (docs/nats-permissions.md); the API server needs no Redis; and the entries
// expire with the stream they describe (the bucket's TTL is the stream's max
// age).
package sessionindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ralphmesh/ralph/pkg/events"
)

// The states a session can be in, as people see them: running is every
// phase of the builder's loop that is not an end.
const (
	StateRunning   = "running"
	StateCompleted = "completed"
	StateFailed    = "failed"
	StateEscalated = "escalated"
	StateCancelled = "cancelled"
)

// Summary is a session in a list.
type Summary struct {
	ID          string    `json:"id"`
	Team        string    `json:"team"`
	State       string    `json:"state"`
	Reason      string    `json:"reason"`
	CurrentTask string    `json:"current_task"`
	Iterations  int       `json:"iterations"`
	Tokens      int       `json:"tokens"`
	StartedAt   time.Time `json:"started_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Task is one task of a session's task graph. Subtasks are the ids of the
// subtasks a decomposition made of it; ParentID is its parent's, for a
// subtask.
type Task struct {
	ID       string   `json:"id"`
	Title    string   `json:"title"`
	Status   string   `json:"status"`
	ParentID string   `json:"parent_id"`
	Depth    int      `json:"depth"`
	Turns    int      `json:"turns"`
	Attempts int      `json:"attempts"`
	Subtasks []string `json:"subtasks"`
}

// RoleUsage is what one role's model spent on a session.
type RoleUsage struct {
	Calls        int64 `json:"calls"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Entry is a session as the index keeps it.
type Entry struct {
	Summary
	Workspace string               `json:"workspace"`
	Limits    events.Limits        `json:"limits"`
	Tasks     []Task               `json:"tasks"`
	Usage     map[string]RoleUsage `json:"usage"`
	// Phase and Step are where the builder's loop is.
	Phase string `json:"phase"`
	Step  int    `json:"step"`
	// Version is the version of the session's state the entry shows: an
	// entry never replaces one of a later version.
	Version int64 `json:"version"`
}

// Running reports whether the session is neither over nor paused.
func (e Entry) Running() bool { return e.State == StateRunning }

// visible is e without what changes at every write (UpdatedAt, Version,
// Step), to tell whether a write would show anything new.
func (e Entry) visible() Entry {
	e.UpdatedAt, e.Version, e.Step = time.Time{}, 0, 0
	return e
}

// ErrNotFound is wrapped when the index has no entry for a session.
var ErrNotFound = errors.New("no such session")

// Bucket is the KV bucket of the index under prefix.
func Bucket(prefix string) string { return events.StreamName(prefix) + "_SESSIONS" }

// Stream is the stream behind the bucket, which NATS permissions name.
func Stream(prefix string) string { return "KV_" + Bucket(prefix) }

// KeyPrefix is the subject prefix of the bucket's keys.
func KeyPrefix(prefix string) string { return "$KV." + Bucket(prefix) + "." }

// sessionKey is where session of team is kept. Session ids have no dots,
// so a session key has two tokens and a day's tokens three.
func sessionKey(team, session string) string { return team + "." + session }

// dayKey is where team's tokens of day (YYYYMMDD) are kept.
func dayKey(team, day string) string { return team + ".tokens." + day }

// Config shapes the bucket.
type Config struct {
	// TTL is how long an entry is kept after its last write: the stream's
	// max age, so an entry goes with its session's events. Zero keeps them.
	TTL      time.Duration
	Replicas int
}

// Bootstrap creates or updates the bucket under prefix; a bucket already
// configured as asked is left alone, so that a client whose NATS user may
// only look it up starts against a bucket an administrator created.
func Bootstrap(ctx context.Context, js jetstream.JetStream, prefix string, c Config) error {
	if c.Replicas < 1 {
		c.Replicas = 1
	}
	want := jetstream.KeyValueConfig{
		Bucket:      Bucket(prefix),
		Description: "Ralph mesh session index",
		History:     1,
		TTL:         c.TTL,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}
	if kv, err := js.KeyValue(ctx, want.Bucket); err == nil {
		if st, err := kv.Status(ctx); err == nil {
			have := st.Config()
			if have.Description == want.Description && have.History == want.History && have.TTL == want.TTL && have.Replicas == want.Replicas {
				return nil
			}
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, want); err != nil {
		return fmt.Errorf("bootstrap the session index %s: %w", want.Bucket, err)
	}
	return nil
}

// Index reads and writes the session index of one prefix.
type Index struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	prefix string

	// mu guards last: what this process wrote last for each session, so
	// that a write that would show nothing new is skipped and one that does
	// costs one round trip (an update at the revision known) unless another
	// process wrote in between.
	mu   sync.Mutex
	last map[string]written
}

type written struct {
	rev   uint64
	entry Entry
}

// Open binds to the index under prefix (Bootstrap made it).
func Open(ctx context.Context, js jetstream.JetStream, prefix string) (*Index, error) {
	kv, err := js.KeyValue(ctx, Bucket(prefix))
	if err != nil {
		return nil, fmt.Errorf("open the session index %s: %w", Bucket(prefix), err)
	}
	return &Index{js: js, kv: kv, prefix: prefix, last: map[string]written{}}, nil
}

// Put writes e unless the index has an entry of a later version, or of the
// same version showing the same; the entry's StartedAt is the first one
// written. It compares and sets, so concurrent writers of one session
// (builder replicas) leave the latest version.
func (x *Index) Put(ctx context.Context, e Entry) error {
	if err := events.ValidTeam(e.Team); err != nil {
		return fmt.Errorf("index %s: %w", e.ID, err)
	}
	if err := events.ValidSession(e.ID); err != nil {
		return fmt.Errorf("index %s: %w", e.ID, err)
	}
	key := sessionKey(e.Team, e.ID)
	x.mu.Lock()
	prev, known := x.last[key]
	x.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if known {
			if !prev.entry.StartedAt.IsZero() {
				e.StartedAt = prev.entry.StartedAt
			}
			if prev.entry.Version > e.Version || (prev.entry.Version == e.Version && sameVisible(prev.entry, e)) {
				return nil
			}
		}
		data, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("index %s: %w", e.ID, err)
		}
		rev, err := x.kv.Update(ctx, key, data, prev.rev)
		if err == nil {
			x.remember(key, written{rev: rev, entry: e})
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) || attempt >= 5 {
			return fmt.Errorf("index %s: %w", e.ID, err)
		}
		// Another writer was first: compare with what it wrote.
		if prev, known, err = x.read(ctx, key); err != nil {
			return fmt.Errorf("index %s: %w", e.ID, err)
		}
	}
}

// Forget drops what this process remembers of a session it wrote (the
// session ended), so the memory does not grow with every session ever run.
func (x *Index) Forget(team, session string) {
	x.mu.Lock()
	delete(x.last, sessionKey(team, session))
	x.mu.Unlock()
}

func (x *Index) remember(key string, w written) {
	x.mu.Lock()
	x.last[key] = w
	x.mu.Unlock()
}

func sameVisible(a, b Entry) bool {
	ja, _ := json.Marshal(a.visible())
	jb, _ := json.Marshal(b.visible())
	return string(ja) == string(jb)
}

// read is the stored entry of key, known false when there is none.
func (x *Index) read(ctx context.Context, key string) (written, bool, error) {
	kve, err := x.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return written{}, false, nil
	}
	if err != nil {
		return written{}, false, err
	}
	var e Entry
	if err := json.Unmarshal(kve.Value(), &e); err != nil {
		return written{}, false, fmt.Errorf("entry %s: %w", key, err)
	}
	return written{rev: kve.Revision(), entry: e}, true, nil
}

// Get is the entry of session of team; an error wrapping ErrNotFound when
// the index has none.
func (x *Index) Get(ctx context.Context, team, session string) (Entry, error) {
	if err := events.ValidTeam(team); err != nil {
		return Entry{}, err
	}
	if err := events.ValidSession(session); err != nil {
		return Entry{}, err
	}
	w, found, err := x.read(ctx, sessionKey(team, session))
	if err != nil {
		return Entry{}, fmt.Errorf("session %s: %w", session, err)
	}
	if !found {
		return Entry{}, fmt.Errorf("session %s of team %s: %w", session, team, ErrNotFound)
	}
	return w.entry, nil
}

// List is every entry of team ("" for every team), newest first.
func (x *Index) List(ctx context.Context, team string) ([]Entry, error) {
	t := "*"
	if team != "" {
		if err := events.ValidTeam(team); err != nil {
			return nil, err
		}
		t = team
	}
	var out []Entry
	err := x.scan(ctx, KeyPrefix(x.prefix)+t+".*", func(data []byte) {
		var e Entry
		if json.Unmarshal(data, &e) == nil {
			out = append(out, e)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return out, nil
}

// Running counts team's running sessions.
func (x *Index) Running(ctx context.Context, team string) (int, error) {
	all, err := x.List(ctx, team)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range all {
		if e.Running() {
			n++
		}
	}
	return n, nil
}

// scan calls fn with the latest value of every key on filter, through one
// ordered consumer of the bucket's stream (delivering the last message per
// subject) that it reads until nothing is pending: what a team's NATS user
// may create (the filter, in the API subject, names the team).
func (x *Index) scan(ctx context.Context, filter string, fn func([]byte)) error {
	cons, err := x.js.OrderedConsumer(ctx, Stream(x.prefix), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return err
	}
	if cons.CachedInfo().NumPending == 0 {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return err
		}
		if msg.Headers().Get("KV-Operation") == "" {
			fn(msg.Data())
		}
		if meta.NumPending == 0 {
			return nil
		}
	}
}

// dayTokens is the value of a day key.
type dayTokens struct {
	Tokens int64 `json:"tokens"`
}

// TeamTokens is what team's sessions spent on day (Day), as the builder
// last recorded it.
func (x *Index) TeamTokens(ctx context.Context, team, day string) (int64, error) {
	kve, err := x.kv.Get(ctx, dayKey(team, day))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("tokens of team %s on %s: %w", team, day, err)
	}
	var d dayTokens
	if err := json.Unmarshal(kve.Value(), &d); err != nil {
		return 0, fmt.Errorf("tokens of team %s on %s: %w", team, day, err)
	}
	return d.Tokens, nil
}

// SetTeamTokens records team's tokens of day, unless a larger figure is
// recorded already (the total only grows; writers that learn it out of
// order leave the largest).
func (x *Index) SetTeamTokens(ctx context.Context, team, day string, total int64) error {
	key := dayKey(team, day)
	for attempt := 0; ; attempt++ {
		var rev uint64
		kve, err := x.kv.Get(ctx, key)
		switch {
		case err == nil:
			var d dayTokens
			if json.Unmarshal(kve.Value(), &d) == nil && d.Tokens >= total {
				return nil
			}
			rev = kve.Revision()
		case !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted):
			return fmt.Errorf("record tokens of team %s on %s: %w", team, day, err)
		}
		data, _ := json.Marshal(dayTokens{Tokens: total})
		if _, err = x.kv.Update(ctx, key, data, rev); err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) || attempt >= 5 {
			return fmt.Errorf("record tokens of team %s on %s: %w", team, day, err)
		}
	}
}

// End shows session of team as ended in state with reason at time at,
// keeping the rest of its entry (and its version, so the next write of the
// session's state replaces it): for a session ended without its state (it
// was lost, or could not be written), which the state's writes cannot show.
// A session the index does not have gets an entry of its own.
func (x *Index) End(ctx context.Context, team, session, state, reason string, at time.Time) error {
	key := sessionKey(team, session)
	for attempt := 0; ; attempt++ {
		w, found, err := x.read(ctx, key)
		if err != nil {
			return fmt.Errorf("index %s: %w", session, err)
		}
		e := w.entry
		if !found {
			e = Entry{Summary: Summary{ID: session, Team: team, StartedAt: at}, Tasks: []Task{}, Usage: map[string]RoleUsage{}}
		}
		// One version more than the entry had, so that a write of the
		// state the entry showed does not bring the session back to life;
		// the state's next save (its version is one more too) replaces it.
		e.State, e.Reason, e.UpdatedAt = state, reason, at
		e.Version++
		data, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("index %s: %w", session, err)
		}
		rev, err := x.kv.Update(ctx, key, data, w.rev)
		if err == nil {
			x.remember(key, written{rev: rev, entry: e})
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) || attempt >= 5 {
			return fmt.Errorf("index %s: %w", session, err)
		}
	}
}
