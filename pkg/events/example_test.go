package events_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/ralphmesh/ralph/pkg/events"
)

// A service builds an event with New (or Must, for payloads it built
// itself) and publishes it on its subject; the id is deterministic, so a
// step that publishes again is deduplicated.
func ExampleNew() {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	env, err := events.New(events.TaskCompleted, "s-42", "T1", 7, at,
		events.TaskCompletedData{TaskID: "T1", Iterations: 5, Attempts: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(env.ID)
	// The session belongs to team "web": its events are under the team.
	env = env.For("web")
	fmt.Println(events.Subject("ralph", env.TeamOrDefault(), env.Session, env.Type))
	fmt.Println(string(env.Data))
	// Output:
	// s-42/7/task.completed/T1
	// ralph.s.web.s-42.task.completed
	// {"task_id":"T1","iterations":5,"attempts":2}
}

// A handler gets a decoded envelope and asks for its payload by type.
// DecodeAs refuses a type that is not the one registered for the event.
func ExampleDecodeAs() {
	wire := events.Must(events.SessionFailed, "s-42", "", 9, time.Unix(0, 0),
		events.SessionFailedData{Reason: "token budget exhausted", Iterations: 8}).Marshal()

	env, err := events.Decode(wire)
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := events.DecodeAs[events.SessionFailedData](env)
	fmt.Println(d.Reason, d.Iterations, err)

	_, err = events.DecodeAs[events.SessionEscalatedData](env)
	fmt.Println(errors.Is(err, events.ErrPayloadType))
	fmt.Println(err)
	// Output:
	// token budget exhausted 8 <nil>
	// true
	// invalid event: payload type does not match the event type: decode session.failed payload as events.SessionEscalatedData: its payload is events.SessionFailedData
}

// Decode checks the payload against its type's rules, so an event no
// handler could use is invalid before any handler sees it; the bus
// dead-letters it.
func ExampleDecode_invalidPayload() {
	raw := []byte(`{"id":"s-42/3/iteration.analyzed/T1","type":"iteration.analyzed","schema":1,` +
		`"session":"s-42","task":"T1","step":3,"time":"2026-01-02T03:04:05Z",` +
		`"data":{"iteration":3,"signal":{"pattern":"circular_tools","confidence":1.5,"action":"nudge"}}}`)
	_, err := events.Decode(raw)
	fmt.Println(errors.Is(err, events.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// invalid event: iteration.analyzed payload: field confidence: 1.5 not in [0,1]
}

// The registry names the payload of every event type.
func ExamplePayloadType() {
	for _, typ := range []events.Type{events.IterationCompleted, events.CompactionRequested} {
		fmt.Println(typ, "carries", events.PayloadType(typ))
	}
	// Output:
	// iteration.completed carries events.IterationRecord
	// compaction.requested carries events.CompactionRequestedData
}
