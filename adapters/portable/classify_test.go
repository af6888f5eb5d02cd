package portable_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

func TestClassifyNet(t *testing.T) {
	dial := func(err error) error { return fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: err}) }
	for _, c := range []struct {
		err    error
		secure bool
		want   driver.Class
	}{
		{fmt.Errorf("x: %w", ports.ErrClosed), false, driver.Class{Code: ports.ErrClosed}},
		{fmt.Errorf("x: %w", ports.ErrAuth), false, driver.Class{Code: ports.ErrAuth}},
		{tls.RecordHeaderError{Msg: "first record"}, true, driver.Class{Code: ports.ErrTLS}},
		{tls.RecordHeaderError{Msg: "first record"}, false, driver.Class{}},
		{dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), false, driver.Class{Code: ports.ErrRefused, Retryable: true}},
		{dial(os.ErrDeadlineExceeded), false, driver.Class{Code: ports.ErrTimeout, Retryable: true}},
		{fmt.Errorf("read: %w", io.EOF), false, driver.Class{Code: ports.ErrUnreachable, Retryable: true}},
		{dial(syscall.ECONNRESET), true, driver.Class{Code: ports.ErrUnreachable, Retryable: true}},
		{errors.New("ERR unknown command"), true, driver.Class{}},
	} {
		if got := portable.ClassifyNet(c.err, c.secure); got != c.want {
			t.Errorf("ClassifyNet(%v, secure=%v) = %+v, want %+v", c.err, c.secure, got, c.want)
		}
	}
}
