package kit

import (
	"cmp"
	"slices"
)

// Mark is the settlement of one offset-addressed record: the log that
// holds it (a partition), its offset and its outcome (an acknowledgement
// type).
type Mark[L cmp.Ordered, V comparable] struct {
	Log L
	Off int64
	V   V
}

// Run is a run of contiguous offsets of one log, First to Last inclusive,
// all with one outcome.
type Run[L cmp.Ordered, V comparable] struct {
	Log         L
	First, Last int64
	V           V
}

// Runs sorts marks by log and offset (in place) and coalesces them into
// the fewest runs of contiguous offsets with one outcome, in that order:
// the shape of a broker that acknowledges by ranges (a Kafka share
// group's acknowledgement batches of a first offset, a last offset and a
// type; an AMQP 1.0 disposition of a first and a last delivery id with
// one state), so that a round settled in any order costs one range per
// gap or change of outcome. An offset marked twice starts a run of its
// own: the broker sees both.
func Runs[L cmp.Ordered, V comparable](marks []Mark[L, V]) []Run[L, V] {
	slices.SortFunc(marks, func(x, y Mark[L, V]) int { return cmp.Or(cmp.Compare(x.Log, y.Log), cmp.Compare(x.Off, y.Off)) })
	var out []Run[L, V]
	for i := 0; i < len(marks); {
		j := i + 1
		for j < len(marks) && marks[j].Log == marks[i].Log && marks[j].Off == marks[j-1].Off+1 && marks[j].V == marks[i].V {
			j++
		}
		out = append(out, Run[L, V]{Log: marks[i].Log, First: marks[i].Off, Last: marks[j-1].Off, V: marks[i].V})
		i = j
	}
	return out
}
