// Package faults is sluice's broker-neutral fault-injection kit: it breaks
// things on purpose while messages flow and counts, with a tck.Ledger,
// that nothing confirmed was lost and every duplicate is accounted for.
//
//	func TestReliability(t *testing.T) {
//		faults.Run(t, faults.Target{
//			Name:  "amqp",
//			Start: startRabbit, // a Broker with its address and fault hooks
//			Dial:  dialAMQP,    // a new adapter ("process") at an address
//		})
//	}
//
// Run runs every scenario as a subtest with a fresh broker from
// Target.Start and a fresh ledger, and ends each with the ledger's LEDGER
// line (tck.Ledger.Check): a lost message fails the scenario. A scenario
// whose fault the broker cannot take (no hook, an in-process broker
// without connections) is skipped with the reason.
//
// # Scenarios
//
//	broker-restart   Broker.Restart mid-stream, producers and consumers running
//	conn-reset       every connection reset (TCP RST) through a Proxy, twice
//	blackhole        connections stalled (nothing forwarded), then torn down
//	stall            connections stalled (stalled reads), then resumed
//	consumer-kill    a consumer process (this test binary, re-executed)
//	                 SIGKILLed with completions pending; a new consumer in the
//	                 same group must get those messages (it plays the killed
//	                 process's identity: brokers with per-client sessions,
//	                 such as MQTT, hand them to the restarted client)
//	dlq-fail         dead-letter publishes fail: originals stay unsettled
//	                 and reach the dead-letter topic once the fault heals
//	send-unconfirmed publishes go unconfirmed for a while; the producer
//	                 retries, duplicates are counted, nothing confirmed is lost
//	handler-panic    handlers panic: retried, then dead-lettered with the panic
//	slow-handler     slow handlers: in flight never exceeds the limit
//	poison-flood     mostly poison: healthy messages keep flowing
//	soak             (build tag soak) a long run with random transient
//	                 failures and poison; reports peak RSS
//	inbox-kill       exactly-once effects across crashes: a consumer running
//	                 flow.New with QoS ExactlyOnce → inbox.Sink into a SQLite
//	                 file (one business row per delivery, in the inbox's
//	                 transaction) is crashed right after a commit and before
//	                 its ack, its restart crashed again mid-stream at a
//	                 random point, and a third consumer finishes the group;
//	                 the ledger then counts effects per message id (Effects):
//	                 lost (no effect) and dup-effects must be 0, and the inbox
//	                 must have suppressed at least one duplicate delivery.
//	                 Consumer processes SIGKILLed where the broker is reached
//	                 over the network; on an in-process broker the crash is
//	                 simulated by closing the consumer's adapter while it is
//	                 held after the commit (see scenarioInboxKill)
//	rpc-restart      Broker.Restart while a flow/rpc client calls steadily and
//	                 a replier (rpc.Serve over a LoadBalance subscription)
//	                 answers, holding two requests across the restart's
//	                 start: every reply whose publish the replier's Send
//	                 confirmed must reach the client (answered, late or
//	                 duplicate), every call (retried with a new call when
//	                 it got no reply) must be answered, and every confirmed
//	                 request settled; one RPC line
//	                 (RPC <target> <scenario> calls=… replied-confirmed=…
//	                 arrived=… lost=0 retried=…) beside the LEDGER line of
//	                 the requests
//	rpc-reset        the same with every connection of the client process
//	                 and of the replier process reset through the proxies
//
// inbox-kill is the one scenario that needs a database: the kit imports
// operators/inbox and the pure-Go SQLite driver (modernc.org/sqlite) for
// it, so that it runs on every target without a change to the adapters'
// tests. Neither is a broker client, and tck sits above operators, so the
// layering rules (tck/layering_test.go, adapters/deps_test.go) hold.
//
// broker-restart, conn-reset, blackhole, stall and send-unconfirmed run
// the same stream: a producer of single-message sends, a producer of
// multi-message Send calls (two senders of 20 messages a call at a steady
// pace, every tenth poison) that is in a call when the fault begins and
// keeps sending until five calls started after it healed were confirmed, a consumer and a dead-letter consumer. At the
// end a fresh consumer joins the group and a fresh dead-letter consumer
// starts; every message whose Send returned nil must be settled and every
// confirmed dead letter seen on the dead-letter topic. The connection
// faults go through one proxy per process and must each hit at least one
// connection of the producer and one of the consumer.
//
// Every scenario ends with a goroutine leak check (goleak) once the
// scenario's adapters and broker are closed, ignoring only what
// Target.IgnoreLeaks lists.
//
// # Excuses
//
// A known broker defect may turn a failure into a SKIP that names it, but
// only with proof that the defect explains it: Target.BrokerDrops excuses
// messages that never reached any client (Target.Arrivals) and were sent
// inside a fault window. A message a client received, a failed
// settlement, a consumer that cannot start, a leaked sluice goroutine
// still fail.
//
// # Timing
//
// Waits are bounded (Target.Timeout) and wait for ledger counts, not for
// time. Time appears only as the subject of a fault: how long a link
// stays stalled, how slow a slow handler is, how fast a producer sends.
package faults
