// Package events owns the wire format of Ralph mesh: the envelope every
// event travels in, the typed payload of each event type, subject names,
// and the validation applied when an event is decoded.
package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sync/atomic"
	"time"
)

// SchemaVersion is the envelope schema this build writes and reads.
const SchemaVersion = 1

// ErrInvalid is wrapped by every decode or validation failure. Such an event
// can never succeed, so the bus treats it as permanent (dead letter).
var ErrInvalid = errors.New("invalid event")

var sessionPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Envelope is what is published on the bus. ID is deterministic (see
// MsgID) so that a redelivered step that publishes again is deduplicated by
// JetStream.
type Envelope struct {
	ID     string `json:"id"`
	Type   Type   `json:"type"`
	Schema int    `json:"schema"`
	// Team owns the session; empty is DefaultTeam (every event before
	// teams). It picks the subject (Subject), so every event of a session
	// carries its session's team: each service answers in the team of the
	// event it answers (For).
	Team    string          `json:"team,omitempty"`
	Session string          `json:"session"`
	Task    string          `json:"task,omitempty"`
	Step    int             `json:"step"`
	Time    time.Time       `json:"time"`
	Data    json.RawMessage `json:"data"`
	// checked is the payload as New or Decode decoded and validated it
	// from Data, so that the bus's Validate before a publish and the
	// handler's DecodeAs after a delivery do not decode it again. It
	// holds for that Data only (an envelope whose Data was replaced is
	// decoded afresh); it is not part of the wire format.
	checked *checkedPayload
}

// checkedPayload is a payload decoded and validated from data. It is
// handed out once (DecodeAs), so two callers never share its slices.
type checkedPayload struct {
	data  json.RawMessage
	value any
	taken atomic.Bool
}

// checkedFor is the checked payload of e if it was decoded from e.Data.
func (e Envelope) checkedFor() *checkedPayload {
	c := e.checked
	if c == nil || len(c.data) != len(e.Data) || len(c.data) == 0 || &c.data[0] != &e.Data[0] {
		return nil
	}
	return c
}

// check validates e and keeps its payload as decoded.
func (e *Envelope) check() error {
	if err := e.validateFields(); err != nil {
		return err
	}
	if e.checkedFor() != nil {
		return nil
	}
	v, err := e.Payload()
	if err != nil {
		return err
	}
	e.checked = &checkedPayload{data: e.Data, value: v}
	return nil
}

// MsgID is the deterministic id of the event of type typ emitted at step of
// session for task.
func MsgID(session string, step int, typ Type, task string) string {
	return fmt.Sprintf("%s/%d/%s/%s", session, step, typ, task)
}

// ValidSession reports whether id can be used as a session id (it becomes a
// subject token and part of Redis keys).
func ValidSession(id string) error {
	if !sessionPattern.MatchString(id) {
		return fmt.Errorf("%w: session id %q must be 1-64 letters, digits, '_' or '-'", ErrInvalid, id)
	}
	return nil
}

// New builds an envelope for payload, validating the payload first so that
// nothing invalid is ever published.
func New(typ Type, session, task string, step int, at time.Time, payload any) (Envelope, error) {
	if !typ.Known() {
		return Envelope{}, fmt.Errorf("%w: unknown event type %q", ErrInvalid, typ)
	}
	if err := ValidSession(session); err != nil {
		return Envelope{}, err
	}
	if rv := reflect.ValueOf(payload); !rv.IsValid() || (rv.Kind() == reflect.Pointer && rv.IsNil()) {
		return Envelope{}, fmt.Errorf("%w: %s payload: required", ErrInvalid, typ)
	}
	if err := checkPayloadType(typ, payload); err != nil {
		return Envelope{}, err
	}
	data, err := json.Marshal(payload)
	if err != nil {
		return Envelope{}, fmt.Errorf("encode %s payload: %w", typ, err)
	}
	// Marshal relies on the time being encodable (RFC 3339 needs a
	// four-digit year).
	if _, err := at.UTC().MarshalJSON(); err != nil {
		return Envelope{}, fmt.Errorf("%w: time: %v", ErrInvalid, err)
	}
	env := Envelope{
		ID: MsgID(session, step, typ, task), Type: typ, Schema: SchemaVersion,
		Session: session, Task: task, Step: step, Time: at.UTC(), Data: data,
	}
	// What New builds, Decode accepts: a negative step or an invalid
	// payload is refused here rather than dead-lettered later. The payload
	// is validated as it will arrive, decoded from the wire.
	if err := env.check(); err != nil {
		return Envelope{}, err
	}
	return env, nil
}

// For is e in team: what a service answering e's session publishes is
// e2.For(e.Team), so that the answer lands among the session's events.
// The team is checked when the envelope is validated (published).
func (e Envelope) For(team string) Envelope {
	e.Team = team
	return e
}

// TeamOrDefault is the team the envelope belongs to: its own, or
// DefaultTeam when it names none.
func (e Envelope) TeamOrDefault() string {
	if e.Team == "" {
		return DefaultTeam
	}
	return e.Team
}

// Must is New for payloads built by the code itself, where a failure is a
// programming error rather than bad input.
func Must(typ Type, session, task string, step int, at time.Time, payload any) Envelope {
	env, err := New(typ, session, task, step, at, payload)
	if err != nil {
		panic(err)
	}
	return env
}

// Decode parses and validates an envelope and its payload, so an event with
// a payload its type does not allow is invalid here (the bus dead-letters
// it) and never reaches a handler.
func Decode(raw []byte) (Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return Envelope{}, fmt.Errorf("%w: envelope is not JSON: %v", ErrInvalid, err)
	}
	if err := env.check(); err != nil {
		return Envelope{}, err
	}
	return env, nil
}

// Validate checks the envelope's fields, then its payload decoded as the
// type registered for e.Type and validated by that type's Validate method.
func (e Envelope) Validate() error {
	return e.check()
}

// validateFields checks the envelope's own fields.
func (e Envelope) validateFields() error {
	switch {
	case e.ID == "":
		return fmt.Errorf("%w: field id: required", ErrInvalid)
	case !e.Type.Known():
		return fmt.Errorf("%w: field type: unknown event type %q", ErrInvalid, e.Type)
	case e.Schema != SchemaVersion:
		return fmt.Errorf("%w: field schema: version %d not supported (want %d)", ErrInvalid, e.Schema, SchemaVersion)
	case e.Step < 0:
		return fmt.Errorf("%w: field step: negative", ErrInvalid)
	case len(e.Data) == 0 || string(e.Data) == "null":
		return fmt.Errorf("%w: field data: required", ErrInvalid)
	}
	if e.Team != "" {
		if err := ValidTeam(e.Team); err != nil {
			return fmt.Errorf("field team: %w", err)
		}
	}
	return ValidSession(e.Session)
}

// Decode unmarshals the payload into v and validates it when v has a
// Validate method.
func (e Envelope) Decode(v any) error {
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("%w: %s payload: %v", ErrInvalid, e.Type, err)
	}
	if val, ok := v.(interface{ Validate() error }); ok {
		if err := val.Validate(); err != nil {
			return fmt.Errorf("%w: %s payload: %v", ErrInvalid, e.Type, err)
		}
	}
	return nil
}

// Marshal encodes the envelope for publishing.
func (e Envelope) Marshal() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		// An Envelope holds only strings, ints, a time and raw JSON that
		// was produced by json.Marshal, so this cannot fail.
		panic(fmt.Sprintf("marshal envelope %s: %v", e.ID, err))
	}
	return b
}
