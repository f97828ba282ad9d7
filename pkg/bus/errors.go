package bus

import (
	"errors"

	"github.com/ralphmesh/ralph/pkg/events"
)

// permanentError marks a failure that no redelivery can fix.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent wraps err so the runner terminates the message and dead-letters
// it with the reason instead of redelivering it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err: err}
}

// IsPermanent reports whether err must not be retried: it was marked with
// Permanent, or it is an invalid event.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p) || errors.Is(err, events.ErrInvalid)
}

// unavailableError marks a failure of the infrastructure (Redis or NATS
// unreachable, loading, read-only) rather than of the work: the event's
// data is safe and the same handler will succeed once the server is back.
type unavailableError struct{ err error }

func (u unavailableError) Error() string { return u.err.Error() }
func (u unavailableError) Unwrap() error { return u.err }

// Unavailable wraps err to say that a server the handler needs is
// unreachable for now. RideOut waits such failures out (up to a budget)
// instead of letting them use up the event's deliveries.
func Unavailable(err error) error {
	if err == nil || IsUnavailable(err) {
		return err
	}
	return unavailableError{err: err}
}

// Unavailability is what an error of a package that does not import bus
// implements to say the same as Unavailable (pkg/store's outage errors).
type Unavailability interface {
	error
	Unavailable() bool
}

// IsUnavailable reports whether err, or an error it wraps, was marked with
// Unavailable or is an Unavailability that says so. A permanent error is
// never unavailable: Permanent wins.
func IsUnavailable(err error) bool {
	if err == nil || IsPermanent(err) {
		return false
	}
	var u unavailableError
	if errors.As(err, &u) {
		return true
	}
	var ua Unavailability
	return errors.As(err, &ua) && ua.Unavailable()
}
