package kit

import (
	"cmp"
	"slices"
)

// CumulativeAcks acknowledges the deliveries of one channel on a broker
// whose acknowledgement can cover every delivery up to a tag (AMQP 0-9-1
// basic.ack with multiple, a cumulative ack). Settle only records; Ack
// then acks, with one cumulative ack, every tag up to the highest below
// which every delivery is settled: a round settled in any order, or many
// rounds, cost one ack on the wire. A delivery settled above an unsettled
// one waits for it, and an unsettled tag is never acked. Tags are added
// in increasing order as the deliveries are handed out. Not safe for
// concurrent use.
type CumulativeAcks struct {
	// Ack sends the broker's ack of tag alone, or of every tag up to it
	// when cumulative is true.
	Ack     func(tag uint64, cumulative bool) error
	out     []ackTag // handed out and not acked on the wire, ascending
	settled int      // how many of out are settled
}

type ackTag struct {
	tag     uint64
	settled bool
}

// Add records a tag handed out, larger than every tag added before.
func (a *CumulativeAcks) Add(tag uint64) { a.out = append(a.out, ackTag{tag: tag}) }

// Settle marks tags settled and returns how many tags are now settled
// with every lower tag (what the next AckSettled acks). unknown counts
// the tags that were not handed out or were settled already (acking them
// again is a protocol error on most brokers; a tag given twice is settled
// already the second time). When unknown is not 0, Settle settles none
// of tags: a settlement is one outcome, as a driver's SendAcks is, and
// its caller may settle the good tags again, singly, after the failure.
func (a *CumulativeAcks) Settle(tags []uint64) (unknown, ready int) {
	var buf [64]int
	marked := buf[:0] // indexes in out settled by this call
	for _, tag := range tags {
		i, ok := slices.BinarySearchFunc(a.out, tag, func(s ackTag, tag uint64) int { return cmp.Compare(s.tag, tag) })
		if !ok || a.out[i].settled {
			unknown++
			continue
		}
		a.out[i].settled = true
		marked = append(marked, i)
	}
	if unknown > 0 {
		for _, i := range marked {
			a.out[i].settled = false
		}
	} else {
		a.settled += len(marked)
	}
	for ready < len(a.out) && a.out[ready].settled {
		ready++
	}
	return unknown, ready
}

// AckSettled acks the settled prefix with one cumulative ack, if there is
// one. An error is Ack's: the channel is lost, and the broker redelivers
// what it did not get.
func (a *CumulativeAcks) AckSettled() error {
	n := 0
	for n < len(a.out) && a.out[n].settled {
		n++
	}
	if n == 0 {
		return nil
	}
	err := a.Ack(a.out[n-1].tag, true)
	a.out = a.out[:copy(a.out, a.out[n:])]
	a.settled -= n
	return err
}

// Flush acks the settled prefix, then each settled tag that waits above
// an unsettled one, singly: for a broker that counts them against its
// prefetch until it has them, or before the channel closes.
func (a *CumulativeAcks) Flush() error {
	if err := a.AckSettled(); err != nil {
		return err
	}
	keep := a.out[:0]
	for i, s := range a.out {
		if !s.settled {
			keep = append(keep, s)
		} else if err := a.Ack(s.tag, false); err != nil {
			a.out = append(keep, a.out[i:]...)
			return err
		} else {
			a.settled--
		}
	}
	a.out = keep
	return nil
}

// Out returns how many tags are handed out and not acked on the wire.
func (a *CumulativeAcks) Out() int { return len(a.out) }

// Waiting reports whether settled tags wait to be acked.
func (a *CumulativeAcks) Waiting() bool { return a.settled > 0 }
