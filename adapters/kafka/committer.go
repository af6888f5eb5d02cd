package kafka

import (
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// committer sends the offset commits of one subscription. One goroutine
// runs rounds: each round gathers the commit position of every live
// partition that moved and sends one OffsetCommit request per session
// generation, with that session's generation and member id.
//
// The fence mutex is held for a whole round. Revoking a partition takes
// it too, so once revoke returns no commit for that partition is in
// flight and none will be sent: a revoked member never commits.
type committer struct {
	client sarama.Client
	conf   *sarama.Config
	group  string
	retry  time.Duration
	report func(error)

	fence sync.Mutex // held for a round, and to revoke partitions

	mu    sync.Mutex
	parts map[*partition]struct{}

	kick chan struct{} // cap 1
	stop chan struct{}
	done chan struct{}
}

func newCommitter(client sarama.Client, conf *sarama.Config, group string, retry time.Duration, report func(error)) *committer {
	c := &committer{
		client: client, conf: conf, group: group, retry: retry, report: report,
		parts: make(map[*partition]struct{}),
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
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

// revoke fences ps: after it returns nothing of them is committed. It
// returns how many records waiting behind their key were dropped.
func (c *committer) revoke(ps ...*partition) (dropped int) {
	c.fence.Lock()
	defer c.fence.Unlock()
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

// revokeAll fences every tracked partition.
func (c *committer) revokeAll() int {
	c.mu.Lock()
	ps := make([]*partition, 0, len(c.parts))
	for p := range c.parts {
		ps = append(ps, p)
	}
	c.mu.Unlock()
	return c.revoke(ps...)
}

// signal asks for a round soon.
func (c *committer) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *committer) run() {
	defer close(c.done)
	var retry <-chan time.Time
	for {
		select {
		case <-c.kick:
		case <-retry:
		case <-c.stop:
			return
		}
		retry = nil
		if !c.round() {
			retry = time.After(c.retry)
		}
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

// round commits every moved partition once. It reports false if some
// commit failed (a retry is due).
func (c *committer) round() bool {
	c.fence.Lock()
	defer c.fence.Unlock()

	byGen := map[int32][]pending{}
	c.mu.Lock()
	for p := range c.parts {
		if pos, ok := p.dirty(); ok {
			byGen[p.gen] = append(byGen[p.gen], pending{p, pos})
		}
	}
	c.mu.Unlock()

	ok := true
	for _, ps := range byGen {
		if !c.send(ps) {
			ok = false
		}
	}
	return ok
}

// send commits ps (one generation) in one request. The fence is held.
func (c *committer) send(ps []pending) bool {
	req := sarama.NewOffsetCommitRequest(c.conf, c.group)
	req.ConsumerGroupGeneration = ps[0].p.gen
	req.ConsumerID = ps[0].p.member
	for _, x := range ps {
		req.AddBlock(x.p.topic, x.p.id, x.pos, 0, "")
	}
	fail := func(err error) bool {
		for _, x := range ps {
			cerr := &CommitError{Group: c.group, Topic: x.p.topic, Partition: x.p.id, Err: err}
			x.p.committedTo(x.pos, cerr)
		}
		c.report(&CommitError{Group: c.group, Topic: ps[0].p.topic, Partition: -1, Err: err})
		return false
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
	ok := true
	for _, x := range ps {
		kerr := sarama.ErrNoError
		if m := resp.Errors[x.p.topic]; m != nil {
			if e, found := m[x.p.id]; found {
				kerr = e
			}
		}
		if kerr == sarama.ErrNoError {
			x.p.committedTo(x.pos, nil)
			continue
		}
		ok = false
		cerr := &CommitError{Group: c.group, Topic: x.p.topic, Partition: x.p.id, Err: kerr}
		x.p.committedTo(x.pos, cerr)
		c.report(cerr)
		if kerr == sarama.ErrNotCoordinatorForConsumer || kerr == sarama.ErrConsumerCoordinatorNotAvailable {
			_ = c.client.RefreshCoordinator(c.group)
		}
	}
	return ok
}
