// Package chaostest owns the chaos test of the mesh (chaos_test.go): several
// sessions run by `ralph service` processes and followed by `ralph run`
// processes while the builder and the critic are killed with SIGKILL, Redis
// is down for a minute and NATS restarts gracefully and hard; at the end it
// checks what must hold whatever happened (every session ended with a
// reason, no shell command ran twice, the stream holds every step once, no
// event over the payload limit) and prints how long each fault took to
// recover from. The package has no code of its own: it is the test's home,
// apart from cmd/ralph, whose tests the test command runs twice.
package chaostest
