package kafka

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// singleActive is the balance strategy of a SingleActive group: every
// partition of the topic goes to one member, the others get none and stand
// by. It is sticky: each member tells the leader in its join metadata
// whether it holds the assignment now and since when it waits, and the
// leader keeps the assignment with its holder; when the holder left (it
// stopped, or its session timed out), the member waiting longest takes
// over. A rebalance therefore moves the assignment only when its holder
// is gone, or when two members both claim it (after a split); then the
// one with the smallest member id wins. The handover is at-least-once:
// what the old holder had not committed is redelivered to the new one.
//
// All members of the group must use it (a member of the same group that
// is not SingleActive fails to join with InconsistentGroupProtocol).
type singleActive struct {
	since  int64       // when this member first joined, unix nanoseconds
	active atomic.Bool // this member holds the assignment
}

const singleActiveName = "sluice-single-active"

func newSingleActive() *singleActive { return &singleActive{since: time.Now().UnixNano()} }

func (s *singleActive) Name() string { return singleActiveName }

// SubscriptionUserData is this member's claim: 1 byte active, 8 bytes since.
func (s *singleActive) SubscriptionUserData([]string) ([]byte, error) {
	b := make([]byte, 9)
	if s.active.Load() {
		b[0] = 1
	}
	binary.BigEndian.PutUint64(b[1:], uint64(s.since))
	return b, nil
}

// OnAssignment records whether this member got partitions.
func (s *singleActive) OnAssignment(a *sarama.ConsumerGroupMemberAssignment, _ int32) {
	held := false
	if a != nil {
		for _, ps := range a.Topics {
			held = held || len(ps) > 0
		}
	}
	s.active.Store(held)
}

// Plan gives every partition to the chosen member.
func (s *singleActive) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	if len(members) == 0 {
		return sarama.BalanceStrategyPlan{}, nil
	}
	type cand struct {
		id     string
		active bool
		since  int64
	}
	cs := make([]cand, 0, len(members))
	for id, m := range members {
		c := cand{id: id, since: 1<<63 - 1}
		if len(m.UserData) == 9 {
			c.active = m.UserData[0] == 1
			c.since = int64(binary.BigEndian.Uint64(m.UserData[1:]))
		}
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if a.active != b.active {
			return map[bool]int{true: -1, false: 1}[a.active]
		}
		if a.active { // two claimants (after a split): the smallest id
			return cmp.Compare(a.id, b.id)
		}
		return cmp.Or(cmp.Compare(a.since, b.since), cmp.Compare(a.id, b.id))
	})
	plan := sarama.BalanceStrategyPlan{}
	for topic, ps := range topics {
		for _, m := range cs {
			if !slices.Contains(members[m.id].Topics, topic) {
				continue
			}
			plan.Add(m.id, topic, ps...)
			break
		}
	}
	return plan, nil
}

func (s *singleActive) AssignmentData(string, map[string][]int32, int32) ([]byte, error) {
	return nil, nil
}

var (
	_ sarama.SubscriptionUserDataBalanceStrategy = (*singleActive)(nil)
	_ sarama.OnAssignmentBalanceStrategy         = (*singleActive)(nil)
)
