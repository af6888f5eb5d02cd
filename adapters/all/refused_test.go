package all_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// TestRefusedConnectionFailsAtOnce: on every broker scheme, Open of an
// address nothing listens on fails with ports.ErrRefused naming the
// address, long before the connect timeout, and a plaintext scheme's
// error says nothing about TLS.
func TestRefusedConnectionFailsAtOnce(t *testing.T) {
	addr := closedPort(t)
	for _, scheme := range adapters.Schemes() {
		if scheme == "mem" || strings.Contains(scheme, "embedded") {
			continue // in process: nothing to connect to
		}
		t.Run(scheme, func(t *testing.T) {
			// The connect timeout is 10 s or more on every adapter; a
			// refused connection must not wait for it.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			a, err := adapters.Open(ctx, scheme+"://"+addr+"/")
			took := time.Since(start)
			if err == nil {
				_ = a.Close(context.Background())
				t.Fatalf("Open of %s succeeded with nothing listening", addr)
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			if !errors.Is(err, ports.ErrRefused) {
				t.Fatalf("Open = %v, want an error matching ports.ErrRefused", err)
			}
			if !strings.Contains(err.Error(), addr) {
				t.Errorf("the error does not name %s: %v", addr, err)
			}
			if plaintext := !tlsSchemes[scheme]; plaintext && (errors.Is(err, ports.ErrTLS) || strings.Contains(err.Error(), "TLS:") || strings.Contains(err.Error(), "TLS)")) {
				t.Errorf("a plaintext %s:// URL's refusal speaks of TLS: %v", scheme, err)
			}
			if took > 8*time.Second {
				t.Errorf("Open took %v to report a refused connection: it waited for a connect timeout", took)
			}
		})
	}
}

// tlsSchemes are the schemes whose URLs may speak TLS: every TLS scheme,
// and rocketmq://, whose tls parameter decides (RocketMQ 5 proxies speak
// TLS by default).
var tlsSchemes = map[string]bool{"amqps": true, "activemq+ssl": true, "kafka+tls": true, "kafkaqueues": true,
	"mqtts": true, "pulsar+ssl": true, "rediss": true, "rocketmq": true}
