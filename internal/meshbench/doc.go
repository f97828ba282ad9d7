// Package meshbench owns `ralph bench mesh`: it runs the whole mesh
// (builder, critic, stuck detector) in this process against one JetStream
// server and one Redis, with the scripted model answering instantly from a
// process of its own, for N concurrent sessions of K steps each, and
// measures what a step costs: iterations/s, the step's latency from
// iteration.requested to iteration.analyzed, the CPU each process spends
// per iteration, allocations and Redis round trips per step, and, on the
// same servers in the same run, the floor the step is compared with (one
// JetStream publish -> durable consumer -> ack round trip, as many Redis
// round trips as the step makes, one HTTP call to the model).
//
// The servers are children of this process when it starts them
// (servers.go); the sessions and the measurements are in run.go, the floor
// in floor.go, the printout and docs/performance.md in report.go.
package meshbench
