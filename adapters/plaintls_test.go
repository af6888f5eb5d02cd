package adapters_test

import (
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
)

func TestExplainPlaintextNamesATLSListener(t *testing.T) {
	srv := httptest.NewTLSServer(nil)
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	err := adapters.ExplainPlaintext(addr, "kafka+tls", io.EOF)
	var pe *adapters.PlaintextOnTLSError
	if !errors.As(err, &pe) || !errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "is a TLS listener") || !strings.Contains(err.Error(), "use kafka+tls://") {
		t.Fatalf("ExplainPlaintext = %v, want a *PlaintextOnTLSError saying use kafka+tls://", err)
	}
	other := errors.New("refused by policy")
	if got := adapters.ExplainPlaintext(addr, "kafka+tls", other); got != other {
		t.Fatalf("ExplainPlaintext(not closed early) = %v, want it unchanged", got)
	}
}

func TestExplainPlaintextKeepsAPlaintextListener(t *testing.T) {
	addr := opentest.Peer(t, func(net.Conn) {}) // closes at once
	if got := adapters.ExplainPlaintext(addr, "kafka+tls", io.EOF); got != io.EOF {
		t.Fatalf("ExplainPlaintext on a plaintext listener = %v, want io.EOF", got)
	}
}
