package kafkawire

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters/kit"
)

// SingleActive is the franz-go group balancer of a SingleActive consumer
// group: one member gets every partition (kit.SingleActive elects it from
// the join metadata's user data). Every member of the group must use it.
type SingleActive struct{ *kit.SingleActive }

var _ kgo.GroupBalancer = SingleActive{}

func (SingleActive) ProtocolName() string { return "sluice-single-active" }

func (SingleActive) IsCooperative() bool { return false }

func (s SingleActive) JoinGroupMetadata(topics []string, _ map[string][]int32, generation int32) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Version, m.Topics, m.UserData, m.Generation = 3, topics, s.Claim(), generation
	return m.AppendTo(nil)
}

// ParseSyncAssignment also tells the kit.SingleActive whether this member
// holds the partitions.
func (s SingleActive) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	a, err := kgo.ParseConsumerSyncAssignment(assignment)
	held := false
	for _, ps := range a {
		held = held || len(ps) > 0
	}
	s.SetActive(held)
	return a, err
}

func (s SingleActive) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(s, members)
	return b, b.MemberTopics(), err
}

// Balance gives every partition of a topic to the best-ranked member that
// subscribes to it.
func (SingleActive) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	claims := make(map[string][]byte, len(b.Members()))
	b.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		claims[m.MemberID] = meta.UserData
	})
	ranked := kit.RankSingleActive(claims)
	plan := b.NewPlan()
	for topic, n := range topics {
		for _, id := range ranked {
			i := slices.IndexFunc(b.Members(), func(m kmsg.JoinGroupResponseMember) bool { return m.MemberID == id })
			if _, meta := b.MemberAt(i); slices.Contains(meta.Topics, topic) {
				ps := make([]int32, n)
				for p := range ps {
					ps[p] = int32(p)
				}
				plan.AddPartitions(&b.Members()[i], topic, ps)
				break
			}
		}
	}
	return plan
}
