package store

import (
	"errors"
	"io"
	"net"

	"github.com/redis/go-redis/v9"
)

// OutageError is a Redis failure that says the server is away, not that
// the request was wrong. It satisfies bus.Unavailability, so the handler
// that got it waits the outage out (bus.RideOut).
type OutageError struct{ Err error }

func (e *OutageError) Error() string { return e.Err.Error() }
func (e *OutageError) Unwrap() error { return e.Err }

// Unavailable is always true: that is what an OutageError is.
func (e *OutageError) Unavailable() bool { return true }

// unavailable makes err an *OutageError when it says Redis is away
// rather than that the request was wrong: the connection was refused,
// reset or timed out, the pool had no connection, or the server is loading
// its data, read-only, or failing over. The handler that got it is then
// run again once Redis is back (bus.RideOut) instead of using up its
// event's deliveries: the session's data is safe, only the server is not
// there.
func unavailable(err error) error {
	if IsOutage(err) {
		return &OutageError{Err: err}
	}
	return err
}

// IsOutage reports whether err from go-redis means the server is
// unavailable for now (see unavailable).
func IsOutage(err error) bool {
	if err == nil {
		return false
	}
	var netErr net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr) ||
		errors.Is(err, redis.ErrPoolTimeout) ||
		redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsMaxClientsError(err) ||
		redis.IsNoReplicasError(err)
}
