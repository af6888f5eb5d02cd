package kafka

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// singleActive is the balance strategy of a SingleActive group: one
// member gets every partition, and keeps it until it leaves (each member's
// join metadata says whether it holds the assignment and since when it
// waits); then the one waiting longest takes over, and of two claimants the
// smallest member id. Every member of the group must use it.
type singleActive struct {
	since  int64       // when this member first joined, unix nanoseconds
	active atomic.Bool // this member holds the assignment
}

const singleActiveName = "sluice-single-active"

func newSingleActive() *singleActive { return &singleActive{since: time.Now().UnixNano()} }

func (s *singleActive) Name() string { return singleActiveName }

// SubscriptionUserData: 1 byte active, 8 bytes since.
func (s *singleActive) SubscriptionUserData([]string) ([]byte, error) {
	b := make([]byte, 9)
	if s.active.Load() {
		b[0] = 1
	}
	binary.BigEndian.PutUint64(b[1:], uint64(s.since))
	return b, nil
}

func (s *singleActive) OnAssignment(a *sarama.ConsumerGroupMemberAssignment, _ int32) {
	held := false
	if a != nil {
		for _, ps := range a.Topics {
			held = held || len(ps) > 0
		}
	}
	s.active.Store(held)
}

func (s *singleActive) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	if len(members) == 0 {
		return sarama.BalanceStrategyPlan{}, nil
	}
	type cand struct {
		id    string
		since int64 // a holder first (of two, the smallest id), then the longest waiting
	}
	cs := make([]cand, 0, len(members))
	for id, m := range members {
		c := cand{id: id, since: 1<<63 - 1}
		if len(m.UserData) == 9 {
			c.since = int64(binary.BigEndian.Uint64(m.UserData[1:]))
			if m.UserData[0] == 1 {
				c.since = -1 << 63
			}
		}
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b cand) int { return cmp.Or(cmp.Compare(a.since, b.since), cmp.Compare(a.id, b.id)) })
	plan := sarama.BalanceStrategyPlan{}
	for topic, ps := range topics {
		if i := slices.IndexFunc(cs, func(c cand) bool { return slices.Contains(members[c.id].Topics, topic) }); i >= 0 {
			plan.Add(cs[i].id, topic, ps...)
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
