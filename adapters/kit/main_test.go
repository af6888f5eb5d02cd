package kit_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// wait bounds every wait in these tests.
const wait = 5 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
