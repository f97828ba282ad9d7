package events

import (
	"errors"
	"fmt"
	"reflect"
)

// payloadTypes is the contract between an event type and its payload: New
// refuses any other payload for the type, Validate (and so Decode and the
// bus) checks the payload as this type, and DecodeAs hands it out. A type
// in AllTypes without an entry here is a test failure.
var payloadTypes = map[Type]reflect.Type{
	SessionStarted:      reflect.TypeFor[SessionStartedData](),
	TaskStarted:         reflect.TypeFor[TaskStartedData](),
	IterationRequested:  reflect.TypeFor[IterationRequestedData](),
	IterationCompleted:  reflect.TypeFor[IterationRecord](),
	IterationAnalyzed:   reflect.TypeFor[IterationAnalyzedData](),
	CritiqueRequested:   reflect.TypeFor[CritiqueRequestedData](),
	CritiqueCompleted:   reflect.TypeFor[CritiqueCompletedData](),
	PruneRequested:      reflect.TypeFor[PruneRequestedData](),
	PruneCompleted:      reflect.TypeFor[PruneCompletedData](),
	DecomposeRequested:  reflect.TypeFor[DecomposeRequestedData](),
	TaskDecomposed:      reflect.TypeFor[TaskDecomposedData](),
	CompactionRequested: reflect.TypeFor[CompactionRequestedData](),
	CompactionCompleted: reflect.TypeFor[CompactionCompletedData](),
	TaskCompleted:       reflect.TypeFor[TaskCompletedData](),
	MemoryUpdated:       reflect.TypeFor[MemoryUpdatedData](),
	SessionCompleted:    reflect.TypeFor[SessionCompletedData](),
	SessionFailed:       reflect.TypeFor[SessionFailedData](),
	SessionEscalated:    reflect.TypeFor[SessionEscalatedData](),
	SessionResumed:      reflect.TypeFor[SessionResumedData](),
	CancelRequested:     reflect.TypeFor[CancelRequestedData](),
	SessionCancelled:    reflect.TypeFor[SessionCancelledData](),
}

// ErrPayloadType is wrapped (with ErrInvalid) when a payload's Go type is
// not the one registered for the event type: New was given the wrong
// payload, or DecodeAs was asked for the wrong one. Either is a bug in the
// caller that no retry mends.
var ErrPayloadType = errors.New("payload type does not match the event type")

// PayloadType is the Go type of the payload of events of type t, or nil
// when t is not in the catalogue.
func PayloadType(t Type) reflect.Type { return payloadTypes[t] }

// Payload decodes and validates the envelope's payload as the type
// registered for e.Type. The result holds a value of that type (not a
// pointer), for code that handles every type, such as a renderer.
func (e Envelope) Payload() (any, error) {
	pt := payloadTypes[e.Type]
	if pt == nil {
		return nil, fmt.Errorf("%w: decode payload: unknown event type %q", ErrInvalid, e.Type)
	}
	p := reflect.New(pt)
	if err := e.Decode(p.Interface()); err != nil {
		return nil, err
	}
	return p.Elem().Interface(), nil
}

// DecodeAs decodes and validates the envelope's payload as T, which must be
// the payload type registered for e.Type: a handler that asks for the wrong
// type gets an error wrapping ErrPayloadType and ErrInvalid (so the bus
// dead-letters the event at once) rather than a zero value that looks
// valid.
func DecodeAs[T any](e Envelope) (T, error) {
	var zero T
	want := payloadTypes[e.Type]
	if want == nil {
		return zero, fmt.Errorf("%w: decode payload: unknown event type %q", ErrInvalid, e.Type)
	}
	if got := reflect.TypeFor[T](); got != want {
		return zero, fmt.Errorf("%w: %w: decode %s payload as %v: its payload is %v", ErrInvalid, ErrPayloadType, e.Type, got, want)
	}
	if c := e.checkedFor(); c != nil && c.taken.CompareAndSwap(false, true) {
		if v, ok := c.value.(T); ok {
			return v, nil
		}
	}
	var v T
	if err := e.Decode(&v); err != nil {
		return zero, err
	}
	return v, nil
}

// checkPayloadType refuses a payload whose type is not registered for typ
// (a pointer to the registered type is accepted).
func checkPayloadType(typ Type, payload any) error {
	got := reflect.TypeOf(payload)
	if got.Kind() == reflect.Pointer {
		got = got.Elem()
	}
	if want := payloadTypes[typ]; got != want {
		return fmt.Errorf("%w: %w: %s payload is %v, want %v", ErrInvalid, ErrPayloadType, typ, reflect.TypeOf(payload), want)
	}
	return nil
}
