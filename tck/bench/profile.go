package main

import (
	"context"
	"fmt"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// The profile contenders run a suite's default pipeline (and its latency
// run) with flow.WithProfile, the subscription's InFlight left zero so that
// the profile sets it (a spec field would win over the profile):
//
//	<suite>-profile-latency            throughput run, ProfileLatency
//	<suite>-profile-throughput         throughput run, ProfileThroughput
//	<suite>-latency-profile-latency    latency run (paced), ProfileLatency
//	<suite>-latency-profile-throughput latency run (paced), ProfileThroughput
//
// docs/profiles.md gives their figures.

type openFunc = func(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error)

// withSpec returns t with every subscription's spec changed by change.
func (t target) withSpec(change func(*ports.SubscriptionSpec)) target {
	wrap := func(open openFunc) openFunc {
		if open == nil {
			return nil
		}
		return func(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
			a, spec, closeFn, err := open(ctx, env, cfg)
			change(&spec)
			return a, spec, closeFn, err
		}
	}
	t.open, t.openLatency = wrap(t.open), wrap(t.openLatency)
	return t
}

// profiled returns t with every subscription's InFlight cleared.
func (t target) profiled() target {
	return t.withSpec(func(s *ports.SubscriptionSpec) { s.InFlight = 0 })
}

// scaledInFlight returns t with every subscription's InFlight multiplied
// by k (a diagnostic: does the in-flight window bound the pipeline?).
func (t target) scaledInFlight(k int) target {
	return t.withSpec(func(s *ports.SubscriptionSpec) { s.InFlight *= k })
}

func profileContenders(suite string, t target) []Contender {
	pt := t.profiled()
	lat, thr := flow.WithProfile(flow.ProfileLatency), flow.WithProfile(flow.ProfileThroughput)
	return []Contender{
		{Name: suite + "-profile-latency", Run: noted(pt.runPipeline(false, lat), flow.ProfileLatency)},
		{Name: suite + "-profile-throughput", Run: noted(pt.runPipeline(false, thr), flow.ProfileThroughput)},
		{Name: suite + "-latency-profile-latency", Latency: true, Run: noted(pt.runLatency(lat), flow.ProfileLatency)},
		{Name: suite + "-latency-profile-throughput", Latency: true, Run: noted(pt.runLatency(thr), flow.ProfileThroughput)},
	}
}

// noted replaces a run's note with what the profile set.
func noted(run func(context.Context, Env, Config) (Result, error), p flow.Profile) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		res, err := run(ctx, env, cfg)
		s := p.Settings()
		res.Note = fmt.Sprintf("flow.WithProfile(%v): in-flight %d, %d Sink workers, settle linger %v, %d concurrent Settle calls", p, s.InFlight, s.Workers, s.SettleLinger, s.SettleConcurrency)
		return res, err
	}
}

func profileRatios(suite, den string) []Ratio {
	return []Ratio{
		{Label: suite + "-profile-latency/best-raw", Num: suite + "-profile-latency", Den: []string{den}},
		{Label: suite + "-profile-throughput/best-raw", Num: suite + "-profile-throughput", Den: []string{den}},
	}
}
