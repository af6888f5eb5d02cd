// Package clientleaks names, once, the goroutines pulsar-client-go v0.19.0
// leaves running after its producers, consumers and clients are closed, so
// that every test package of the Pulsar adapter ignores the same upstream
// leaks in its goleak check, and nothing else.
package clientleaks

import "go.uber.org/goleak"

// Ignore is the goleak options for pulsar-client-go v0.19.0's own leaks.
var Ignore = []goleak.Option{
	// A closed producer's send-timeout goroutine exits only at its next
	// tick, up to SendTimeout (30 s) after Close.
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
	// After a successful Consumer.Unsubscribe (a BROADCAST instance's
	// Stop) the partition consumer is marked closed, so its Close returns
	// early and these goroutines are never stopped (consumer_partition.go
	// internalUnsubscribe / Close): three goroutines per stopped instance.
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).runEventsLoop"),
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).dispatcher"),
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.newAckGroupingTracker.func1"),
	// Every chunked message received starts a goroutine that sleeps
	// ExpireTimeOfIncompleteChunk (a minute) and is not stopped when the
	// message completes or the consumer closes (discardChunkIfExpire); it
	// ends on its own.
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*chunkedMsgCtxMap).discardChunkIfExpire"),
	// A consumer that (re)connects tells its dispatcher from a goroutine of
	// its own, `go func() { pc.connectedCh <- struct{}{} }()`
	// (consumer_partition.go grabConn); when the consumer is closed before
	// the dispatcher reads it, that send blocks for the process's life.
	// Seen beside a CPU hog, in adapters/pulsar and in pulsartest.
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).grabConn.func1"),
}
