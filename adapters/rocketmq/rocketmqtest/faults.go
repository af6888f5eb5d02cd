package rocketmqtest

import (
	"context"
	"errors"
	"hash/crc32"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
)

// faults holds the fault hooks' state.
type faults struct {
	mu         sync.Mutex
	refuseNext int
	refuseAll  bool
	noRenewals bool // ChangeInvisibleDuration with a positive duration fails
	control    func(topic string) error
	stallCh    chan struct{} // non-nil while stalled; closed on release
}

// errRefused is the reason a refused send carries.
var errRefused = errors.New("rocketmqtest: send refused by fault hook")

func (f *faults) sendRefused(topic string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuseAll {
		return errRefused
	}
	if f.refuseNext > 0 {
		f.refuseNext--
		return errRefused
	}
	if f.control != nil {
		return f.control(topic)
	}
	return nil
}

// RefuseNextSends makes the next n SendMessage calls fail with
// INTERNAL_SERVER_ERROR; nothing of them is stored. The v5 client reports
// the status as its send error (after the attempts the peer announced, 1 by
// default).
func (b *Broker) RefuseNextSends(n int) {
	b.faults.mu.Lock()
	b.faults.refuseNext = n
	b.faults.mu.Unlock()
}

// RefuseSends makes every SendMessage fail (true) or succeed again (false).
func (b *Broker) RefuseSends(on bool) {
	b.faults.mu.Lock()
	b.faults.refuseAll = on
	b.faults.mu.Unlock()
}

// ControlSend installs a per-message decision: f gets the topic of each
// message sent and returns nil to store it or an error to refuse the whole
// SendMessage with that error's text. nil removes the hook.
func (b *Broker) ControlSend(f func(topic string) error) {
	b.faults.mu.Lock()
	b.faults.control = f
	b.faults.mu.Unlock()
}

// RefuseDeadLetterSends refuses (true) or accepts again (false) every send
// to a dead-letter topic (one whose name starts with DeadLetterPrefix),
// keeping sends to other topics working.
func (b *Broker) RefuseDeadLetterSends(on bool) {
	if !on {
		b.ControlSend(nil)
		return
	}
	b.ControlSend(func(topic string) error {
		if strings.HasPrefix(topic, DeadLetterPrefix) {
			return errors.New("rocketmqtest: dead-letter send refused by fault hook")
		}
		return nil
	})
}

// DropConnections closes every client connection at the TCP level, as a
// proxy restart or network cut does; streams in progress fail with
// Unavailable and clients reconnect. Messages delivered and not yet
// acknowledged stay invisible until their invisible duration passes, then
// are redelivered. It returns how many connections it closed.
func (b *Broker) DropConnections() int { return b.lis.dropAll() }

// Stall makes every RPC that arrives from now on wait (including a
// ReceiveMessage's reply) until the returned release is called, the call's
// own deadline passes (the client then sees DEADLINE_EXCEEDED) or the
// broker closes. Release is idempotent.
func (b *Broker) Stall() (release func()) {
	b.faults.mu.Lock()
	if b.faults.stallCh == nil {
		b.faults.stallCh = make(chan struct{})
	}
	b.faults.mu.Unlock()
	return b.faults.releaseStall
}

func (f *faults) releaseStall() {
	f.mu.Lock()
	if f.stallCh != nil {
		close(f.stallCh)
		f.stallCh = nil
	}
	f.mu.Unlock()
}

func (f *faults) waitStall(ctx context.Context) error {
	f.mu.Lock()
	ch := f.stallCh
	f.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *Broker) unaryFault(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := b.faults.waitStall(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (b *Broker) streamFault(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !strings.HasSuffix(info.FullMethod, "/Telemetry") {
		if err := b.faults.waitStall(ss.Context()); err != nil {
			return err
		}
	}
	return h(srv, ss)
}

func crc32Hex(body []byte) string {
	return strings.ToUpper(strconv.FormatInt(int64(crc32.ChecksumIEEE(body)), 16))
}

// RefuseRenewals makes ChangeInvisibleDuration with a positive duration
// (a renewal; zero, a requeue, still works) answer INTERNAL_SERVER_ERROR
// until called with false.
func (b *Broker) RefuseRenewals(on bool) {
	b.faults.mu.Lock()
	b.faults.noRenewals = on
	b.faults.mu.Unlock()
}

func (f *faults) renewalRefused() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.noRenewals
}
