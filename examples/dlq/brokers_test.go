package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	_ "github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/examples/internal/readme"
	"github.com/sluicemq/sluice/ports"
)

// TestSessionOnBrokers runs the README's session against a real
// RabbitMQ and a real redis-server, through adapters.Open as the tool
// does: every command succeeds and prints what it prints on mem, but for
// the failure times, which are the broker run's own.
func TestSessionOnBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts brokers")
	}
	want := normalise(readme.Expected(t))
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"amqp", func(t *testing.T) string {
			// a namespace of its own on the shared node: the session
			// starts from an empty area
			return rabbittest.Shared(t).URL + "?namespace=" + ports.NewID()
		}},
		{"redis", func(t *testing.T) string {
			return "redis://" + redistest.Own(t, redistest.Options{Durable: true}).Addr + "/0"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url(t)
			got := normalise(runSession(t, func() (ports.Adapter, error) {
				return adapters.Open(context.Background(), url)
			}))
			if got != want {
				t.Fatalf("session on %s differs from the README's (times normalised)\n--- got\n%s\n--- want\n%s", tc.name, got, want)
			}
		})
	}
}

// anyTime matches a time the tool prints; normalise keeps the session's
// fixed publish times (09:0x) and audit clock (10:00) of 2026-01-05.
var anyTime = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

// normalise replaces the failure times of a session's output by a
// placeholder of the same width, so that the tables keep their layout.
func normalise(s string) string {
	return anyTime.ReplaceAllStringFunc(s, func(ts string) string {
		if strings.HasPrefix(ts, "2026-01-05T09:0") || ts == "2026-01-05T10:00:00Z" {
			return ts
		}
		return "YYYY-MM-DDTHH:MM:SSZ"
	})
}
