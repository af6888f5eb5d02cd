// Package operators extends flow pipelines with settlement-aware
// operators: batching, poison classification, delay, bounded local retry,
// concurrency (limited, order-preserving, key-ordered), timeout, throttle,
// deduplication and keyed windows.
//
// Every operator keeps the settlement contract of package flow: each input
// item is completed exactly once, and only when everything derived from it
// has completed. An operator that drops an item completes it; one that
// holds items (a batch, a window, a delay) completes them when what it
// made of them completes, and cancels them — no settlement, so the broker
// redelivers — when the pipeline stops before that. Panics in user
// functions become *ports.PanicError failures of the item concerned.
//
// # Stages and wrappers
//
// Stages take a flow.Stream and return one (Batch, Delay, Classify,
// Concurrent, KeyOrdered, Timeout, Throttle, Dedupe, Window,
// RedeliveryLimit). Wrappers take a handler function and return one
// (Retry, RetryMap, Classifier.Wrap). Map, Filter and FlatMap are in flow.
//
// # Options
//
// Operator options are plain structs whose zero fields take documented
// defaults. An invalid option makes the pipeline's Start fail with an
// error wrapping ports.ErrInvalid (through flow.Invalid), before anything
// is received. Retry, which wraps a function rather than a stream, panics
// instead.
//
// # Related packages
//
// schedule is the local delay scheduler adapters use for delayed
// messages and delayed requeue; operators/attempts counts delivery attempts
// for adapters whose broker does not; operators/rxbridge connects a
// pipeline to rxgo Observables.
package operators
