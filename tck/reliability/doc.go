// Package reliability holds sluice's end-to-end reliability proofs that
// are not tied to one broker: the message-state guarantees of an
// idempotent consumer over a real database (SQLite, through
// modernc.org/sqlite), and fuzz targets for the decoders of untrusted
// bytes reachable from a delivery (typed payload decode, envelope and
// dead-letter headers). Everything is in its tests; run them with
//
//	go test -race ./tck/reliability/
//
// and fuzz one decoder with, for example,
//
//	go test -run '^$' -fuzz FuzzDecodePayload -fuzztime 60s ./tck/reliability/
//
// Seed corpora live in testdata/fuzz. The fault-injection kit that runs
// against each broker is package tck/faults; the ledger is tck.Ledger.
package reliability
