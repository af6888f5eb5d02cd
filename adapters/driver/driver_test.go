package driver_test

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

type classifier driver.Class

func (c classifier) Classify(error) driver.Class { return driver.Class(c) }

func TestConnectError(t *testing.T) {
	cause := errors.New("dial tcp: refused")
	var be *ports.BrokerError
	err := driver.ConnectError(classifier{Code: ports.ErrRefused, Retryable: true}, cause)
	if !errors.As(err, &be) || be.Op != "connect" || !be.Retryable || !errors.Is(err, ports.ErrRefused) || !errors.Is(err, cause) {
		t.Errorf("classified: %#v", err)
	}
	if err := driver.ConnectError(classifier{}, cause); err != cause {
		t.Errorf("unclassified: %v, want the error as it is", err)
	}
}
