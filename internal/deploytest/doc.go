// Package deploytest owns the tests of what the repository ships to deploy
// Ralph mesh: the Helm chart (rendered by helm and decoded into the
// Kubernetes API types with unknown fields refused), docker-compose.yaml
// (loaded with the compose-spec library and checked against the services
// the binary has, then brought up for real with Docker), and the
// multi-host end-to-end test: a three-node NATS cluster, Redis and every
// service in its own container on a private Docker network, with faults
// injected while a session runs.
//
// The container tests run only when RALPH_DEPLOY_TEST=1 (scripts/test.sh
// sets it when Docker answers, and fails in CI when it does not); without
// it each says so in one line and skips. They make their images with
// scripts/images.sh unless RALPH_DEPLOY_IMAGE names a ralph image already
// made.
package deploytest
