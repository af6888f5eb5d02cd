// Package rocketmqtest is an in-process RocketMQ 5 protocol peer: a gRPC
// server implementing apache.rocketmq.v2.MessagingService (the protocol a
// RocketMQ 5 proxy speaks) on a loopback port, built on the generated server
// stubs that github.com/apache/rocketmq-clients/golang/v5 ships, so the
// official v5 Go client (tested with v5.1.4) connects to it exactly as to a
// proxy. No RocketMQ broker can run on the project's machines; fakes of the
// client's interfaces would never exercise its wire behaviour.
//
//	b, err := rocketmqtest.Start()
//	...
//	defer b.Close()
//	cfg := &golang.Config{Endpoint: b.Endpoint(), ConsumerGroup: "g",
//		Credentials: &credentials.SessionCredentials{}}
//
// # Implemented
//
//   - TLS with a throwaway self-signed certificate (the client's default:
//     TLS without verification); WithPlaintext for clients with
//     EnableSsl=false.
//   - QueryRoute: one READ_WRITE message queue (id 0) per topic, served at
//     the endpoints the request names (the client's access point, so a
//     client behind a TCP proxy stays on it), else the peer's; topics are made on first use unless WithoutAutoCreate.
//     QueryAssignment answers the same queue (for push consumers).
//   - Telemetry: each Settings command is answered with settings of its
//     kind; Publishing carries MaxBodySize (WithMaxBodySize, default 4 MiB;
//     without it the client refuses every send with "max size=0"). A
//     subscription's settings make its consumer group exist on each
//     subscribed topic and record the client's long-polling timeout.
//     Heartbeat and NotifyClientTermination are answered OK.
//   - SendMessage: user properties, tag, keys, message group, born time and
//     host, message id kept; SystemProperties.DeliveryTimestamp holds the
//     message until then (delayed delivery to the millisecond, where
//     RocketMQ's timer wheel ticks coarser). Bodies above MaxBodySize are
//     refused with MESSAGE_BODY_TOO_LARGE.
//   - Consumer groups: a group sees every message stored after it was
//     made, each group independently (two groups = two copies; consumers in
//     one group compete). A NEW GROUP STARTS AT THE TOPIC'S END: it never
//     sees messages stored before it existed (its first Telemetry
//     subscription, ReceiveMessage, QueryAssignment or CreateGroup makes it).
//     Apache RocketMQ's pop consumption of a new group is governed by the
//     broker's consume-from-where rules, which can replay a topic whose
//     first log file is still present: a real cluster may start earlier.
//   - ReceiveMessage: long polling (the request's timeout, else the one the
//     client announced, else DefaultLongPolling, bounded by the call's
//     deadline), up to BatchSize messages each made invisible for the
//     request's InvisibleDuration with a fresh receipt handle and
//     DeliveryAttempt = deliveries so far (1 on the first); an empty poll
//     answers MESSAGE_NOT_FOUND, as RocketMQ does. Body digests are CRC32.
//   - AckMessage (any number of entries; per-entry status, MULTIPLE_RESULTS
//     when mixed), ChangeInvisibleDuration (a new receipt handle; the old
//     one is dead; 0 = ready now) and ForwardMessageToDeadLetterQueue. A
//     handle is dead once acknowledged, changed, or expired: those calls
//     answer INVALID_RECEIPT_HANDLE.
//   - Invisibility expiry: a delivered message not acknowledged within its
//     invisible duration is delivered again with DeliveryAttempt+1.
//   - Dead letters: after WithMaxDeliveryAttempts deliveries (default 17)
//     an expiring message moves to "%DLQ%<group>" (DeadLetterPrefix) with
//     its properties, as soon as the last invisibility ends.
//   - Inspection: Backlog, Groups, Stored, Counters.
//   - Fault hooks: DropConnections (TCP cut), RefuseSends / RefuseNextSends /
//     RefuseDeadLetterSends / ControlSend (SendMessage answered
//     INTERNAL_SERVER_ERROR, nothing stored), Stall (every new RPC except
//     Telemetry waits until released or its deadline).
//
// # Not implemented
//
// Transactions (EndTransaction, orphaned-transaction recovery), FIFO
// ordering by message group (stored and returned, not enforced), SQL92 and
// tag filters (every message matches), PullMessage / offsets (the
// "lite pull" API), RecallMessage, authentication (credentials accepted,
// not checked), more than one queue per topic, persistence, retention.
//
// # What this proves
//
// That a client speaks the protocol the v5 Go client expects of a proxy
// and behaves correctly against the semantics above. It does not prove
// Apache RocketMQ's own behaviour (its timer precision, revive timing,
// retry-topic handling, consume-from-where of new groups, load balancing
// across queues and brokers): run against a real cluster for that.
//
// # Client quirks found with this peer (v5.1.4)
//
//   - v5.1.3 dropped a received batch at random (Receive reported
//     DEADLINE_EXCEEDED after the answer came; the messages returned after
//     their invisible duration, one attempt later). v5.1.4 fixes it.
//   - SimpleConsumer.Ack ignores the status of the AckMessage reply: an
//     ack with a dead receipt handle returns nil (Counters().BadHandles
//     shows it).
//   - producerSettings.applySettingsCommand writes the retry policy from a
//     server's Settings.BackoffPolicy without synchronisation: a data race
//     under -race with the heartbeat goroutine. The peer sends no
//     BackoffPolicy; a real proxy does.
//   - The client sends its settings on the Telemetry stream from whichever
//     goroutine first uses a topic, with no lock around the stream's Send:
//     concurrent first uses of new topics can hang it.
//   - Start blocks (sleeping in 1 s steps) until the first Telemetry
//     settings reply, and forever when the client was given no topic:
//     always give producers WithTopics and simple consumers a subscription.
//   - The client writes its log to $rocketmq.client.logRoot
//     (/logs/rocketmqlogs by default).
package rocketmqtest
