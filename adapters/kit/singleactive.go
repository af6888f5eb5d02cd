package kit

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync/atomic"
	"time"
)

// SingleActive is one member's side of a single-active election in a
// group whose members assign the work themselves (a Kafka consumer
// group's client-side assignor, RocketMQ's queue allocation): each member
// joins with its [SingleActive.Claim], and the leader gives everything to
// the first member of [RankSingleActive]. The member holding the work
// keeps it until it leaves; then the one waiting longest takes over, and
// of two alike the smallest member id. Every member of the group must use
// it. Safe for concurrent use.
type SingleActive struct {
	since  int64       // when this member first joined, unix nanoseconds
	active atomic.Bool // this member holds the work
}

// NewSingleActive returns a member waiting since now.
func NewSingleActive() *SingleActive { return &SingleActive{since: time.Now().UnixNano()} }

// Claim is the member's join metadata: 1 byte active, 8 bytes since.
func (s *SingleActive) Claim() []byte {
	b := make([]byte, 9)
	if s.active.Load() {
		b[0] = 1
	}
	binary.BigEndian.PutUint64(b[1:], uint64(s.since))
	return b
}

// SetActive records whether the member got the work in the last
// assignment.
func (s *SingleActive) SetActive(active bool) { s.active.Store(active) }

// RankSingleActive orders members (member id → its Claim) best first: the
// holder, then the longest waiting, ties by the smallest id; a member
// with a malformed claim comes last.
func RankSingleActive(claims map[string][]byte) []string {
	type cand struct {
		id    string
		since int64
	}
	cs := make([]cand, 0, len(claims))
	for id, b := range claims {
		c := cand{id: id, since: 1<<63 - 1}
		if len(b) == 9 {
			c.since = int64(binary.BigEndian.Uint64(b[1:]))
			if b[0] == 1 {
				c.since = -1 << 63
			}
		}
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b cand) int { return cmp.Or(cmp.Compare(a.since, b.since), cmp.Compare(a.id, b.id)) })
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.id
	}
	return out
}
