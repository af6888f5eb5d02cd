package flow_test

import (
	"testing"

	"github.com/sluicemq/sluice/flow"
)

func BenchmarkCompletionSucceed(b *testing.B) {
	b.ReportAllocs()
	var n int
	for b.Loop() {
		c := flow.NewCompletion(func(flow.Outcome) { n++ })
		_ = c.Succeed()
	}
}

func BenchmarkCompletionSplit4(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		c := flow.NewCompletion(func(flow.Outcome) {})
		for _, k := range c.Split(4) {
			_ = k.Succeed()
		}
	}
}

func BenchmarkJoin16(b *testing.B) {
	b.ReportAllocs()
	members := make([]*flow.Completion, 16)
	for b.Loop() {
		for i := range members {
			members[i] = flow.NewCompletion(func(flow.Outcome) {})
		}
		_ = flow.Join(members...).Succeed()
	}
}
