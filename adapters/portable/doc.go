// Package portable is sluice's one implementation of the Port
// (ports.Adapter and ports.Subscription) over a broker driver
// (adapters/driver). It owns every rule of the settlement contract that
// does not depend on the broker, once, for every adapter:
//
//   - Send: validation, stamping (ports.Message.Stamp: HeaderID and the
//     partition key's mirror), the size check against
//     Capabilities.MaxMessageBytes, the delay fallback for brokers without
//     native delay (the message is stored at once with a not-before header
//     and held on the consuming side), and one *ports.SendError per
//     unconfirmed message, classified with a portable code;
//   - Receive: the one in-flight bound (SubscriptionSpec.InFlight), the
//     identity rule (ports.IDSource), the redelivery count carried by
//     requeue copies (poison when malformed), reconnect with backoff for retryable broker
//     failures, reported on Errors;
//   - Settle: double-settlement detection (ports.ErrAlreadyCompleted,
//     ports.ErrConflict), counted requeue copies and the dead-letter copy
//     published with confirms before the original is acknowledged where
//     the broker has no native requeue or dead letter, delayed requeues
//     held on one scheduler where the broker cannot delay them, the
//     best-effort rule, and no acknowledgement batching of its own: flow's
//     settlement engine hands a whole round to one Settle call, which
//     becomes one driver.Subscription.SendAcks call; a delivery whose
//     settlement failed is handed back a second later if still unsettled
//     (driver.Abandoner, driver.Requeuer, else handed out again here);
//   - the Errors channel, secret scrubbing of every error it returns or
//     reports, and the capability log line at New.
//
// A broker adapter is a driver plus a constructor that returns
// portable.New(driver, opts); see docs/writing-an-adapter.md.
package portable
