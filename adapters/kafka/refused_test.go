package kafka_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
)

// A port where nothing listens fails New at once with ports.ErrRefused,
// not after the client's own retries and timeouts.
func TestNewRefusedFailsAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	a, err := kafka.New(ctx, kafka.Options{Brokers: []string{addr}})
	if err == nil {
		_ = a.Close(context.Background())
		t.Fatal("New succeeded against a port where nothing listens")
	}
	if !errors.Is(err, ports.ErrRefused) {
		t.Fatalf("New = %v, want an error matching ports.ErrRefused", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("New took %v to report a refused connection, want it at once", took)
	}
}
