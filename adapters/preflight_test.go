package adapters_test

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/ports"
)

func TestPreflight(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	_ = l.Close()
	if err := adapters.Preflight([]string{refused}, nil, 5*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("every address refused: %v, want ECONNREFUSED", err)
	}

	plain := opentest.Peer(t, func(c net.Conn) { _, _ = c.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\n")) })
	addrs := []string{refused, plain}
	if err := adapters.Preflight(addrs, nil, 5*time.Second); err != nil {
		t.Fatalf("a plaintext broker answered: %v, want nil", err)
	}
	if err := adapters.Preflight(addrs, &tls.Config{}, 5*time.Second); !errors.Is(err, ports.ErrTLS) {
		t.Fatalf("TLS to a plaintext port: %v, want ErrTLS", err)
	}
	if adapters.SpeaksTLS(plain, 5*time.Second) {
		t.Fatal("SpeaksTLS true for a plaintext port")
	}
}
