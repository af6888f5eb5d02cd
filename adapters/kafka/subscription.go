package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// subscription is one consumer-group member consuming one topic.
type subscription struct {
	a     *Adapter
	spec  ports.SubscriptionSpec
	topic ports.Topic
	phys  string
	group string

	client       sarama.Client // the consumer group's (fetches, group protocol)
	commitClient sarama.Client // commits and offset look-ups
	cg           sarama.ConsumerGroup
	commit       *committer
	sched        *schedule.Scheduler

	cancel context.CancelFunc // stops the consume loop
	loops  sync.WaitGroup

	established chan struct{} // closed after the first session's Setup
	setupErr    chan error    // first Consume failure before Setup

	mu       sync.Mutex
	ready    []*record
	readyCh  chan struct{} // closed and replaced when ready grows or state changes
	buffered int           // records held: ready, delayed, waiting for their key
	spaceCh  chan struct{} // closed and replaced when buffered drops
	// readyWaiting and spaceWaiting: a Receive waits on readyCh, a claim
	// on spaceCh (each channel is replaced only when someone waits).
	readyWaiting, spaceWaiting bool
	limit                      int // bound on buffered
	stopped                    bool

	errs *kit.Errors // Errors(): never blocks, drops and counts when full

	retention time.Duration // records older than this are skipped (0: none)

	stopOnce sync.Once
	stopErr  error
	stopDone chan struct{}
}

// Subscribe joins the consumer group of spec and returns once the group
// session is established and the start offsets of the claimed partitions
// are committed, so a message sent after it returns is delivered.
func (a *Adapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	if spec.QoS == ports.BestEffort {
		a.logger().Info("sluice kafka: QoS best-effort falls back to at-least-once (Kafka has no weaker delivery class): failed deliveries are requeued and poison dead-lettered",
			"topic", string(spec.Topic), "group", spec.Group)
	}
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return nil, ports.ErrClosed
	}
	instance := spec.Instance
	if instance == "" {
		instance = randomID()
	}
	s := &subscription{
		a: a, spec: spec, topic: spec.Topic,
		phys:        a.names.topic(spec.Topic),
		group:       a.names.group(spec, instance),
		sched:       schedule.New(schedule.Options{}),
		established: make(chan struct{}),
		setupErr:    make(chan error, 1),
		readyCh:     make(chan struct{}),
		spaceCh:     make(chan struct{}),
		limit:       spec.InFlight * a.cfg.Buffer,
		errs:        kit.NewErrors(64),
		stopDone:    make(chan struct{}),
	}
	if err := a.ensureTopic(ctx, s.phys); err != nil {
		s.sched.Stop()
		return nil, err
	}
	s.retention = a.retention(spec.Topic, s.phys)
	if err := a.checkInstanceFree(spec, s.group); err != nil { // instance.go
		s.sched.Stop()
		return nil, err
	}
	conf := a.cfg.consumerConfig(spec.InFlight)
	if spec.Start == ports.StartEarliest {
		conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	}
	if spec.SingleActive {
		conf.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{newSingleActive()}
	}
	client, err := sarama.NewClient(a.cfg.Brokers, conf)
	if err != nil {
		s.sched.Stop()
		return nil, fmt.Errorf("kafka: consumer client: %w", err)
	}
	// Commits and offset look-ups get their own connections: on the
	// consumer's connection an OffsetCommit waits behind the Fetch long
	// poll in flight (a broker answers one connection's requests in
	// order, and a Fetch with nothing new is held up to MaxWaitTime).
	commitClient, err := sarama.NewClient(a.cfg.Brokers, conf)
	if err != nil {
		s.sched.Stop()
		_ = client.Close()
		return nil, fmt.Errorf("kafka: commit client: %w", err)
	}
	cg, err := sarama.NewConsumerGroupFromClient(s.group, client)
	if err != nil {
		s.sched.Stop()
		_ = client.Close()
		_ = commitClient.Close()
		return nil, fmt.Errorf("kafka: consumer group %s: %w", s.group, err)
	}
	s.client, s.commitClient, s.cg = client, commitClient, cg
	s.commit = newCommitter(commitClient, conf, s.group, a.cfg, s.report)

	loopCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.loops.Add(2)
	go s.consumeLoop(loopCtx)
	go s.groupErrors()

	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		_ = s.Stop(ctx)
		return nil, ports.ErrClosed
	}
	a.subs[s] = struct{}{}
	a.mu.Unlock()

	select {
	case <-s.established:
		return s, nil
	case err := <-s.setupErr:
		_ = s.Stop(context.Background())
		return nil, fmt.Errorf("kafka: join group %s: %w", s.group, err)
	case <-ctx.Done():
		_ = s.Stop(context.Background())
		return nil, ctx.Err()
	}
}

// consumeLoop runs group sessions until the subscription stops. Each
// rebalance ends a session; Consume is then called again.
func (s *subscription) consumeLoop(ctx context.Context) {
	defer s.loops.Done()
	h := &groupHandler{s: s}
	first := true
	failures := 0 // consecutive failed sessions
	for {
		err := s.cg.Consume(ctx, []string{s.phys}, h)
		if ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return
		}
		if err == nil {
			failures = 0
		} else {
			if first && !h.setupDone.Load() {
				select {
				case s.setupErr <- err:
				default:
				}
			}
			s.report(fmt.Errorf("kafka: group %s session: %w (rejoining)", s.group, err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.a.cfg.Rejoin.Delay(failures)):
			}
			failures++
		}
		first = false
	}
}

// groupErrors forwards the consumer group's asynchronous errors.
func (s *subscription) groupErrors() {
	defer s.loops.Done()
	for err := range s.cg.Errors() {
		s.report(fmt.Errorf("kafka: group %s: %w", s.group, err))
	}
}

// Receive returns up to max available deliveries, blocking until one is
// available, ctx is done or the subscription stops.
func (s *subscription) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	if max < 1 {
		max = 1
	}
	for {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return nil, ports.ErrClosed
		}
		var out []*ports.Delivery
		if len(s.ready) > 0 {
			out = make([]*ports.Delivery, 0, min(max, len(s.ready)))
		}
		taken := 0
		for taken < len(s.ready) && len(out) < max {
			r := s.ready[taken]
			s.ready[taken] = nil
			taken++
			if d := s.handOut(r); d != nil {
				out = append(out, d)
			}
		}
		s.ready = s.ready[taken:]
		if taken > 0 {
			s.buffered -= taken
			s.notifySpaceLocked()
		}
		wait := s.readyCh
		s.readyWaiting = true
		s.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// handOut turns a ready record into a Delivery, or nil when its partition
// was revoked meanwhile (s.mu held; takes p.mu).
func (s *subscription) handOut(r *record) *ports.Delivery {
	p := r.p
	p.mu.Lock()
	if p.revoked.Load() {
		p.mu.Unlock()
		return nil
	}
	r.state = stateOut
	local := r.local
	first := !r.handed
	r.handed = true
	p.mu.Unlock()
	// The first hand-out is the record's own Delivery (one allocation
	// less per record); a hand-out after a failed settlement is a new
	// one, so the earlier Delivery, which the core may still hold, is
	// never changed.
	d := &r.first
	if !first {
		d = new(ports.Delivery)
	}
	// The headers are shared with every hand-out of the record and with
	// its requeue and dead-letter copies: a Delivery's headers are
	// read-only (ports.Delivery).
	*d = ports.Delivery{
		Message:         r.dec.msg,
		RedeliveryCount: r.dec.count + local,
		Facts:           r.facts,
		ReceivedAt:      r.received,
		Handle:          r,
	}
	if d.ID, d.IDSource = ports.IdentityFromHeaders(r.dec.msg.Headers); d.ID == "" {
		d.ID, d.IDSource = r.brokerID(), ports.IDBroker
	}
	if r.dec.bad != nil {
		d.Err = r.dec.bad // the core dead-letters it as poison
	}
	return d
}

// brokerID is the identity of a record without the producer's ce-id:
// "kafka:<topic>/<partition>/<offset>" (the physical topic), the same on
// every redelivery of the record. Requeue and dead-letter copies carry it
// as their ce-id.
func (r *record) brokerID() string {
	return "kafka:" + r.p.topic + "/" + r.p.idText + "/" + r.dec.offsetText
}

// makeFacts builds the record's broker facts for logs.
func (r *record) makeFacts() map[string]string {
	f := make(map[string]string, 7)
	f["topic"] = r.p.topic
	f["partition"] = r.p.idText
	f["offset"] = r.dec.offsetText
	f["generation"] = r.p.genText
	f["member"] = r.p.member
	if r.dec.timeText != "" {
		f["timestamp"] = r.dec.timeText
	}
	if r.dec.bad != nil {
		f["header-error"] = r.dec.bad.Error()
	}
	return f
}

// makeAvailable queues rs for Receive, each through the scheduler while
// its not-before time lies ahead. It reorders rs's backing array.
func (s *subscription) makeAvailable(rs ...*record) {
	var now time.Time
	n := 0
	for _, r := range rs {
		if nb := r.dec.notBefore; !nb.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			if now.Before(nb) {
				if _, err := s.sched.At(nb, func() { s.pushReady(r) }); err == nil {
					continue
				}
			}
		}
		rs[n] = r
		n++
	}
	s.pushReady(rs[:n]...)
}

// redeliverLater hands r out again after delay (a settlement failed).
func (s *subscription) redeliverLater(r *record, delay time.Duration) {
	s.mu.Lock()
	s.buffered++
	s.mu.Unlock()
	if _, err := s.sched.After(delay, func() { s.pushReady(r) }); err != nil {
		s.pushReady(r)
	}
}

// pushReady appends rs to the ready queue (those of a revoked partition
// are dropped) and wakes a waiting Receive.
func (s *subscription) pushReady(rs ...*record) {
	if len(rs) == 0 {
		return
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	dropped := 0
	for _, r := range rs {
		if r.p.revoked.Load() {
			dropped++
			continue
		}
		s.ready = append(s.ready, r)
	}
	if dropped > 0 {
		s.buffered -= dropped
		s.notifySpaceLocked()
	}
	if s.readyWaiting && dropped < len(rs) {
		close(s.readyCh)
		s.readyCh = make(chan struct{})
		s.readyWaiting = false
	}
	s.mu.Unlock()
}

func (s *subscription) unbuffer(n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	s.buffered -= n
	s.notifySpaceLocked()
	s.mu.Unlock()
}

// notifySpaceLocked wakes claims waiting for buffer space, if any.
func (s *subscription) notifySpaceLocked() {
	if !s.spaceWaiting {
		return
	}
	close(s.spaceCh)
	s.spaceCh = make(chan struct{})
	s.spaceWaiting = false
}

// tryReserve reserves up to n more buffer slots without waiting and
// returns how many it reserved.
func (s *subscription) tryReserve(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return 0
	}
	k := min(n, s.limit-s.buffered)
	if k <= 0 {
		return 0
	}
	s.buffered += k
	return k
}

// waitSpace blocks while the buffer is full, until ctx is done.
func (s *subscription) waitSpace(ctx context.Context) bool {
	for {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return false
		}
		if s.buffered < s.limit {
			s.buffered++
			s.mu.Unlock()
			return true
		}
		ch := s.spaceCh
		s.spaceWaiting = true
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// report hands an asynchronous error to Errors without blocking (dropped
// and counted when the buffer is full or after Stop).
func (s *subscription) report(err error) { s.errs.Report(err) }

// Errors reports asynchronous errors; it is closed after Stop.
func (s *subscription) Errors() <-chan error { return s.errs.C() }

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Flush commits every offset recorded before the call (see
// ports.Flusher) and returns once the broker accepted the commit, or with
// the commit error, or when ctx is done. A failed commit is retried every
// Config.CommitRetry until ctx is done; a partition revoked meanwhile is
// no longer committed (its new owner redelivers what it recorded). After
// Stop it returns ports.ErrClosed (Stop committed what was recorded).
func (s *subscription) Flush(ctx context.Context) error {
	if s.isStopped() {
		return ports.ErrClosed
	}
	return s.commit.flush(ctx)
}

var _ ports.Flusher = (*subscription)(nil)
