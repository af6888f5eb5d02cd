package ports

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Action is what an adapter does to a delivery when it settles it.
type Action int

const (
	// Ack: the message is done; the broker must not redeliver it.
	Ack Action = iota + 1
	// Requeue: redeliver the message later, with its redelivery count
	// incremented by one, no earlier than Disposition.Delay.
	Requeue
	// DeadLetter: publish the message, with Disposition.Reason, to the
	// dead-letter topic, wait for the broker's confirm, then remove the
	// original. If the dead-letter publish fails the original stays
	// unsettled.
	DeadLetter
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ACK"
	case Requeue:
		return "REQUEUE"
	case DeadLetter:
		return "DEAD_LETTER"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Disposition is the settlement the core asks an adapter to carry out.
type Disposition struct {
	Action Action
	// Reason is the failure behind Requeue or DeadLetter (nil for Ack). For
	// DeadLetter it is written to HeaderDeadLetterReason.
	Reason error
	// Delay is the requeue backoff: the message must not be redelivered
	// before it has passed. Adapters without native delayed redelivery hold
	// it with the local scheduler.
	Delay time.Duration
	// Attempts is the number of deliveries made (for HeaderAttempts on
	// DeadLetter).
	Attempts int
}

// ReasonText is the reason as a header value: valid UTF-8 (every broker's
// header or property encoding accepts it), at most 1 KiB, cut at a rune
// boundary.
func (d Disposition) ReasonText() string {
	if d.Reason == nil {
		return ""
	}
	s := strings.ToValidUTF8(d.Reason.Error(), "\uFFFD")
	if len(s) > 1024 {
		cut := 1024
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
