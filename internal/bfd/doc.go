// Package bfd is xlb's own Bidirectional Forwarding Detection: RFC 5880
// in asynchronous mode, single hop over UDP and IPv4 or IPv6 as in RFC
// 5881. A
// Manager runs one session per BGP peer that asks for it and reports
// state changes, so that the agent can take a BGP session down as soon
// as BFD declares the peer down, in well under a second instead of the
// BGP hold time.
//
// The protocol state (session.go) is a pure state machine driven with
// explicit times; the Manager (manager.go, runner.go) adds the sockets,
// one goroutine per session for its timers, and one reader for the
// shared receive socket. docs/bfd.md lists what is implemented, what is
// not (authentication, Demand mode, Echo), and measured detection times
// against FRR's bfdd.
package bfd
