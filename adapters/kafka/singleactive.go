package kafka

import (
	"slices"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kit"
)

// singleActive is the balance strategy of a SingleActive group: one
// member gets every partition (kit.SingleActive elects it from the join
// metadata). Every member of the group must use it.
type singleActive struct{ *kit.SingleActive }

var (
	_ sarama.SubscriptionUserDataBalanceStrategy = singleActive{}
	_ sarama.OnAssignmentBalanceStrategy         = singleActive{}
)

func (singleActive) Name() string { return "sluice-single-active" }

func (s singleActive) SubscriptionUserData([]string) ([]byte, error) { return s.Claim(), nil }

func (s singleActive) OnAssignment(a *sarama.ConsumerGroupMemberAssignment, _ int32) {
	held := false
	if a != nil {
		for _, ps := range a.Topics {
			held = held || len(ps) > 0
		}
	}
	s.SetActive(held)
}

func (singleActive) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	claims := make(map[string][]byte, len(members))
	for id, m := range members {
		claims[id] = m.UserData
	}
	ranked := kit.RankSingleActive(claims)
	plan := sarama.BalanceStrategyPlan{}
	for topic, ps := range topics {
		if i := slices.IndexFunc(ranked, func(id string) bool { return slices.Contains(members[id].Topics, topic) }); i >= 0 {
			plan.Add(ranked[i], topic, ps...)
		}
	}
	return plan, nil
}

func (singleActive) AssignmentData(string, map[string][]int32, int32) ([]byte, error) {
	return nil, nil
}
