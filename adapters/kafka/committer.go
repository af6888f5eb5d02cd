package kafka

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// committer sends the offset commits of one subscription. Settle only
// records completions (the partition's commit position moves over the
// contiguous prefix of completed offsets); one goroutine commits those
// positions in rounds: every CommitInterval, as soon as CommitThreshold
// offsets were recorded since the last round, on Flush, and — for the
// partitions concerned — on revoke and stop. Each round sends one
// OffsetCommit request per session generation (in practice one request
// covering every partition), with that session's generation and member id.
//
// The fence mutex is held for a whole round. Revoking a partition takes
// it too, so once revoke returns no commit for that partition is in
// flight and none will be sent: a revoked member never commits.
type committer struct {
	client    sarama.Client
	conf      *sarama.Config
	group     string
	retry     time.Duration
	interval  time.Duration
	threshold int64
	report    func(error)

	fence sync.Mutex // held for a round, and to revoke partitions

	mu    sync.Mutex
	parts map[*partition]struct{}

	recorded atomic.Int64 // offsets recorded since the last round began

	kick    chan struct{}   // cap 1: a round is due now
	flushes chan chan error // Flush requests, answered after their round
	stop    chan struct{}
	done    chan struct{}
}

func newCommitter(client sarama.Client, conf *sarama.Config, group string, cfg Config, report func(error)) *committer {
	c := &committer{
		client: client, conf: conf, group: group,
		retry: cfg.CommitRetry, interval: cfg.CommitInterval, threshold: int64(cfg.CommitThreshold),
		report:  report,
		parts:   make(map[*partition]struct{}),
		kick:    make(chan struct{}, 1),
		flushes: make(chan chan error),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go c.run()
	return c
}

// track adds live partitions.
func (c *committer) track(ps ...*partition) {
	c.mu.Lock()
	for _, p := range ps {
		c.parts[p] = struct{}{}
	}
	c.mu.Unlock()
}

// record notes that n offsets were recorded; it starts a round at once
// when the threshold is reached.
func (c *committer) record(n int) {
	if c.recorded.Add(int64(n)) >= c.threshold {
		c.signal()
	}
}

// release commits what ps recorded (best effort: a failure only means a
// redelivery) and then fences them: after it returns nothing of them is
// committed. It returns how many records waiting behind their key were
// dropped.
func (c *committer) release(ps ...*partition) (dropped int) {
	c.fence.Lock()
	defer c.fence.Unlock()
	_ = c.commitLocked(ps)
	return c.revokeLocked(ps)
}

// revoke fences ps without committing.
func (c *committer) revoke(ps ...*partition) (dropped int) {
	c.fence.Lock()
	defer c.fence.Unlock()
	return c.revokeLocked(ps)
}

func (c *committer) revokeLocked(ps []*partition) (dropped int) {
	c.mu.Lock()
	for _, p := range ps {
		delete(c.parts, p)
	}
	c.mu.Unlock()
	for _, p := range ps {
		dropped += p.revoke()
	}
	return dropped
}

// releaseAll commits and fences every tracked partition (stop).
func (c *committer) releaseAll() int {
	return c.release(c.tracked()...)
}

func (c *committer) tracked() []*partition {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := make([]*partition, 0, len(c.parts))
	for p := range c.parts {
		ps = append(ps, p)
	}
	return ps
}

// signal asks for a round soon.
func (c *committer) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// flush asks for a round that covers everything recorded before the call
// and returns its result. It retries a failed round every CommitRetry
// until it succeeds or ctx is done.
func (c *committer) flush(ctx context.Context) error {
	for {
		w := make(chan error, 1)
		select {
		case c.flushes <- w:
		case <-c.done:
			return ports.ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
		var err error
		select {
		case err = <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err == nil {
			return nil
		}
		select {
		case <-time.After(c.retry):
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
	}
}

func (c *committer) run() {
	defer close(c.done)
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	var retry <-chan time.Time
	var waiters []chan error
	for {
		select {
		case <-c.kick:
		case <-tick.C:
		case <-retry:
		case w := <-c.flushes:
			waiters = append(waiters, w)
		case <-c.stop:
			return
		}
	more:
		for {
			select {
			case w := <-c.flushes:
				waiters = append(waiters, w)
			default:
				break more
			}
		}
		retry = nil
		err := c.round()
		if err != nil {
			retry = time.After(c.retry)
		}
		for _, w := range waiters {
			w <- err
		}
		clear(waiters)
		waiters = waiters[:0]
	}
}

// close stops the goroutine (after its current round).
func (c *committer) close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

type pending struct {
	p   *partition
	pos int64
}

// round commits every moved partition once. It returns the commit errors
// (a retry is due), nil when everything recorded is committed.
func (c *committer) round() error {
	c.fence.Lock()
	defer c.fence.Unlock()
	return c.commitLocked(c.tracked())
}

// commitLocked commits the moved partitions of ps: one request per
// generation. The fence is held.
func (c *committer) commitLocked(ps []*partition) error {
	c.recorded.Store(0)
	byGen := map[int32][]pending{}
	for _, p := range ps {
		if pos, ok := p.dirty(); ok {
			byGen[p.gen] = append(byGen[p.gen], pending{p, pos})
		}
	}
	var errs []error
	for _, ps := range byGen {
		if err := c.send(ps); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// send commits ps (one generation) in one request. The fence is held.
func (c *committer) send(ps []pending) error {
	req := sarama.NewOffsetCommitRequest(c.conf, c.group)
	req.ConsumerGroupGeneration = ps[0].p.gen
	req.ConsumerID = ps[0].p.member
	for _, x := range ps {
		req.AddBlock(x.p.topic, x.p.id, x.pos, 0, "")
	}
	fail := func(err error) error {
		cerr := &CommitError{Group: c.group, Topic: ps[0].p.topic, Partition: -1, Err: err}
		c.report(cerr)
		return cerr
	}
	broker, err := c.client.Coordinator(c.group)
	if err != nil {
		return fail(err)
	}
	resp, err := broker.CommitOffset(req)
	if err != nil {
		_ = c.client.RefreshCoordinator(c.group)
		return fail(err)
	}
	var errs []error
	for _, x := range ps {
		kerr := sarama.ErrNoError
		if m := resp.Errors[x.p.topic]; m != nil {
			if e, found := m[x.p.id]; found {
				kerr = e
			}
		}
		if kerr == sarama.ErrNoError {
			x.p.committedTo(x.pos)
			continue
		}
		cerr := &CommitError{Group: c.group, Topic: x.p.topic, Partition: x.p.id, Err: kerr}
		errs = append(errs, cerr)
		c.report(cerr)
		if kerr == sarama.ErrNotCoordinatorForConsumer || kerr == sarama.ErrConsumerCoordinatorNotAvailable {
			_ = c.client.RefreshCoordinator(c.group)
		}
	}
	return errors.Join(errs...)
}
