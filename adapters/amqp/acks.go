package amqp

import (
	"cmp"
	"slices"
)

// tags are a channel's delivery tags handed out and not yet acked on the
// wire, ascending. A settled tag above an unsettled one waits for it:
// settle acks with one multiple ack up to the highest tag whose lower tags
// are all settled, and never acks an unsettled tag.
type tags struct {
	out []tagState
	ack func(tag uint64, multiple bool) error // the channel's basic.ack
}

type tagState struct {
	tag     uint64
	settled bool
}

func (t *tags) add(tag uint64) { t.out = append(t.out, tagState{tag: tag}) }

// settle marks ts settled and acks the settled prefix; unknown counts the
// tags not handed out or settled already. On an error the channel is
// lost: the broker redelivers what it did not get.
func (t *tags) settle(ts []uint64) (unknown int, err error) {
	for _, tag := range ts {
		i, ok := slices.BinarySearchFunc(t.out, tag, func(s tagState, tag uint64) int { return cmp.Compare(s.tag, tag) })
		if !ok || t.out[i].settled {
			unknown++ // acking it again would close the channel
			continue
		}
		t.out[i].settled = true
	}
	n := 0
	for n < len(t.out) && t.out[n].settled {
		n++
	}
	if n == 0 {
		return unknown, nil
	}
	err = t.ack(t.out[n-1].tag, true)
	t.out = t.out[:copy(t.out, t.out[n:])]
	return unknown, err
}

// flush acks each settled tag that waits above a gap, one basic.ack each:
// the broker counts them against the prefetch until it has them.
func (t *tags) flush() error {
	keep := t.out[:0]
	for i, s := range t.out {
		if !s.settled {
			keep = append(keep, s)
		} else if err := t.ack(s.tag, false); err != nil {
			t.out = append(keep, t.out[i:]...)
			return err
		}
	}
	t.out = keep
	return nil
}

// waiting reports settled tags not acked yet.
func (t *tags) waiting() bool {
	return slices.ContainsFunc(t.out, func(s tagState) bool { return s.settled })
}
