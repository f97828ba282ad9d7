// Package builder owns the Ralph loop: the session state machine (a pure
// function of state and event, machine.go) and the service that runs one
// step at a time, an LLM call plus the tool calls it asked for, with every
// effect journaled so a redelivered step never runs a command twice.
package builder
