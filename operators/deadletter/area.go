package deadletter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Headers a redrive writes, and the one it reads for the failure time.
const (
	// HeaderRedriveCount is how many times the message was redriven from a
	// dead-letter area ("1" on the first redrive).
	HeaderRedriveCount = "sluice-redrive-count"
	// HeaderRedriveAudit is the id of the audit Record of the redrive that
	// sent this copy.
	HeaderRedriveAudit = "sluice-redrive-audit"
	// HeaderFailedAt is the RFC 3339 time the message was dead-lettered
	// (ports.HeaderDeadLetterTime). Every dead-letter copy sluice publishes
	// carries it; a copy the broker made natively does not, and its Entry
	// then has a zero FailedAt: filters and statistics use its publish time
	// (ce-time) instead.
	HeaderFailedAt = ports.HeaderDeadLetterTime
)

// Defaults of Options.
const (
	DefaultBatch       = 100
	DefaultIdle        = time.Second
	DefaultFirstWait   = 5 * time.Second
	DefaultLimit       = 10_000
	DefaultMaxRedrives = 3
	DefaultAlertAt     = 1_000
	// AuditSuffix is appended to the dead-letter topic to name the audit
	// topic ("orders.dlq.audit").
	AuditSuffix = ".audit"
	// AuditGroup is the group Declare creates on the audit topic, so that
	// records are kept on brokers whose groups keep only what follows
	// their creation. Read the trail with a subscription of that group.
	AuditGroup = "audit"
)

// Options tune an Area. Zero fields take the documented defaults.
type Options struct {
	// Batch is the most deliveries held at once: each Receive asks for at
	// most Batch and the subscription's InFlight is Batch. It bounds what a
	// crash in the middle of a redrive duplicates. Default 100.
	Batch int
	// Idle ends a pass when nothing new (a message the pass had not
	// seen) came for this long: the area is empty, or everything left
	// was put back. Default 1s.
	Idle time.Duration
	// FirstWait bounds the first Receive of a pass instead of Idle: a new
	// subscription may need a consumer-group join first. Default 5s.
	FirstWait time.Duration
	// Limit bounds the deliveries one pass examines; a pass that reaches it
	// is partial (Pass.End "limit"). Default 10,000.
	Limit int
	// MaxRedrives refuses a message already redriven this many times
	// (HeaderRedriveCount) unless Request.Force. Default 3.
	MaxRedrives int
	// AlertAt makes Stats log a warning when the area holds at least this
	// many messages. Default 1,000.
	AlertAt int
	// AuditTopic receives the audit records. Default
	// "<topic>.dlq.audit".
	AuditTopic ports.Topic
	// PutBack is how a pass leaves a dead letter in the area. Default
	// PutBackAuto.
	PutBack PutBack
	// Logger receives the audit and alert records. Default slog.Default().
	Logger *slog.Logger
	// Now and NewID replace the clock and the audit-id generator (tests,
	// reproducible sessions). Defaults time.Now and ports.NewID.
	Now   func() time.Time
	NewID func() string
}

func (o Options) withDefaults(source ports.Topic) Options {
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.FirstWait <= 0 {
		o.FirstWait = DefaultFirstWait
	}
	if o.FirstWait < o.Idle {
		o.FirstWait = o.Idle
	}
	if o.Limit <= 0 {
		o.Limit = DefaultLimit
	}
	if o.MaxRedrives <= 0 {
		o.MaxRedrives = DefaultMaxRedrives
	}
	if o.AlertAt <= 0 {
		o.AlertAt = DefaultAlertAt
	}
	if o.AuditTopic == "" {
		o.AuditTopic = ports.DeadLetterTopic(source) + AuditSuffix
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NewID == nil {
		o.NewID = ports.NewID
	}
	return o
}

// PutBack is how a pass leaves a dead letter it does not take in the area
// and moves on to the next.
type PutBack int

const (
	// PutBackAuto requeues where the adapter declares
	// Capabilities.PerMessageAck, and republishes elsewhere — and from the
	// moment a pass sees a full batch it requeued come straight back before
	// anything else (a requeue that returns messages to the head, as
	// RocketMQ's change of invisible duration does; or an area of exactly
	// one batch, which then costs one republish of that batch).
	PutBackAuto PutBack = iota
	// PutBackRequeue settles it with Requeue (the adapter puts it back
	// behind the others).
	PutBackRequeue
	// PutBackRepublish sends a copy to the dead-letter topic, waits for
	// the confirm, then acknowledges the original. It is for adapters
	// without per-message acknowledgement (MQTT: acknowledgements go out in
	// arrival order, so a requeued message holds the in-flight window and
	// a pass could never get past the first batch). The copy reaches every
	// group of the dead-letter topic as a new message: on such brokers,
	// read the dead-letter topic through one group only. A crash between
	// the confirm and the acknowledgement leaves two copies, never none.
	PutBackRepublish
)

// Area is the dead-letter area of one source topic as one group reads it.
// Its methods may be called concurrently, but two passes over one area at
// once each see only part of it (they compete as a LoadBalance group).
type Area struct {
	a      ports.Adapter
	source ports.Topic
	group  string
	o      Options
	// requeueStalls records that this adapter's Requeue was seen handing
	// a full batch straight back (see PutBackAuto).
	requeueStalls atomic.Bool
}

// New returns the area of source's dead letters read by group. It checks
// its arguments and touches no broker.
func New(a ports.Adapter, source ports.Topic, group string, o Options) (*Area, error) {
	if a == nil {
		return nil, &ports.ValueError{Field: "adapter", Reason: "is nil"}
	}
	if err := source.Validate(); err != nil {
		return nil, err
	}
	if err := ports.DeadLetterTopic(source).Validate(); err != nil {
		return nil, err
	}
	if group == "" {
		return nil, &ports.ValueError{Field: "group", Reason: "is required: the area is read through one group of the dead-letter topic"}
	}
	if o.Batch < 0 || o.Limit < 0 || o.MaxRedrives < 0 || o.AlertAt < 0 || o.Idle < 0 || o.FirstWait < 0 {
		return nil, &ports.ValueError{Field: "deadletter.Options", Reason: "must not hold negative values (zero takes the default)"}
	}
	if o.PutBack < PutBackAuto || o.PutBack > PutBackRepublish {
		return nil, &ports.ValueError{Field: "deadletter.Options.PutBack", Reason: fmt.Sprintf("unknown value %d", int(o.PutBack))}
	}
	o = o.withDefaults(source)
	if err := o.AuditTopic.Validate(); err != nil {
		return nil, err
	}
	return &Area{a: a, source: source, group: group, o: o}, nil
}

// Source is the topic whose dead letters the area holds.
func (ar *Area) Source() ports.Topic { return ar.source }

// Topic is the dead-letter topic.
func (ar *Area) Topic() ports.Topic { return ports.DeadLetterTopic(ar.source) }

// Group is the group the area is read through.
func (ar *Area) Group() string { return ar.group }

// AuditTopic is the topic the audit records go to.
func (ar *Area) AuditTopic() ports.Topic { return ar.o.AuditTopic }

// Retention bounds a dead-letter area (see Declare).
type Retention struct {
	// MaxAge drops dead letters older than this (ports.TopicSpec.Retention).
	MaxAge time.Duration
	// MaxLength caps the area at this many messages, the oldest dropped
	// (ports.TopicSpec.MaxLength).
	MaxLength int
}

// DefaultRetention is the bound Declare applies when given the zero
// Retention: 14 days and 100,000 messages.
var DefaultRetention = Retention{MaxAge: 14 * 24 * time.Hour, MaxLength: 100_000}

// Declared reports what Declare could make the broker enforce.
type Declared struct {
	// MaxAge and MaxLength are the bounds enforced (zero: not enforced,
	// because the adapter lacks the capability).
	MaxAge    time.Duration
	MaxLength int
	// NotEnforced lists each asked-for bound the adapter cannot enforce.
	NotEnforced []string
}

// Declare declares the area — the dead-letter topic with group and
// retention r (the zero Retention means DefaultRetention), and the audit
// topic with AuditGroup — through ports.DeclareTopic. A bound the adapter
// cannot enforce (Capabilities.Retention, MaxLength) is left out, logged
// at warning level and listed in Declared.NotEnforced, rather than failing:
// the area is then bounded only by Stats' alert. Call it where the
// application declares its topology, before the first dead letter.
func (ar *Area) Declare(ctx context.Context, r Retention) (Declared, error) {
	if r == (Retention{}) {
		r = DefaultRetention
	}
	if r.MaxAge < 0 || r.MaxLength < 0 {
		return Declared{}, &ports.ValueError{Field: "deadletter.Retention", Reason: "must not be negative"}
	}
	caps := ar.a.Capabilities()
	var out Declared
	spec := ports.TopicSpec{Topic: ar.Topic(), Groups: []string{ar.group}, NoDeadLetter: true}
	if r.MaxAge > 0 {
		if caps.Retention {
			spec.Retention, out.MaxAge = r.MaxAge, r.MaxAge
		} else {
			out.NotEnforced = append(out.NotEnforced, fmt.Sprintf("max age %v (%s has no Capabilities.Retention)", r.MaxAge, ar.a.Name()))
		}
	}
	if r.MaxLength > 0 {
		if caps.MaxLength {
			spec.MaxLength, out.MaxLength = r.MaxLength, r.MaxLength
		} else {
			out.NotEnforced = append(out.NotEnforced, fmt.Sprintf("max length %d (%s has no Capabilities.MaxLength)", r.MaxLength, ar.a.Name()))
		}
	}
	for _, n := range out.NotEnforced {
		ar.o.Logger.Warn("dead-letter retention not enforced by the broker", "topic", string(ar.Topic()), "bound", n, "alert_at", ar.o.AlertAt)
	}
	var re *ports.RedeclareError
	if err := ports.DeclareTopic(ctx, ar.a, spec); errors.As(err, &re) {
		// Declared before with other properties (another group's area, an
		// older bound): keep it as it is and make sure this group exists.
		ar.o.Logger.Warn("dead-letter topic exists with other properties: kept as it is", "topic", string(spec.Topic), "error", err)
		out.NotEnforced = append(out.NotEnforced, "the bounds asked for (the topic exists with other properties: "+strings.Join(re.Diffs, "; ")+")")
		out.MaxAge, out.MaxLength = 0, 0
		if err := ports.DeclareGroup(ctx, ar.a, spec.Topic, ar.group); err != nil && !errors.Is(err, ports.ErrUnsupported) {
			return out, fmt.Errorf("declaring group %q of dead-letter topic %q: %w", ar.group, string(spec.Topic), err)
		}
	} else if err != nil {
		return out, fmt.Errorf("declaring dead-letter topic %q: %w", string(spec.Topic), err)
	}
	if err := ar.declareAudit(ctx); err != nil {
		return out, err
	}
	return out, nil
}

// declareAudit declares the audit topic with AuditGroup; an audit topic
// declared already with other properties is used as it is.
func (ar *Area) declareAudit(ctx context.Context) error {
	err := ports.DeclareTopic(ctx, ar.a, ports.TopicSpec{Topic: ar.o.AuditTopic, Groups: []string{AuditGroup}, NoDeadLetter: true})
	var re *ports.RedeclareError
	if err != nil && !errors.As(err, &re) {
		return fmt.Errorf("declaring audit topic %q: %w", string(ar.o.AuditTopic), err)
	}
	return nil
}
