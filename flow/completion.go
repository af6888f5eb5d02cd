package flow

import (
	"fmt"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// Kind is the terminal state of a Completion.
type Kind uint8

const (
	// Pending: not completed yet.
	Pending Kind = iota
	// Succeeded: everything derived from the delivery completed; settle with ACK.
	Succeeded
	// Failed: a retryable failure; settle with REQUEUE (bounded, then DEAD_LETTER).
	Failed
	// Poisoned: a failure no retry can fix; settle with DEAD_LETTER.
	Poisoned
	// Cancelled: the work was abandoned (stop, cancellation); no settlement.
	Cancelled
)

func (k Kind) String() string {
	switch k {
	case Pending:
		return "pending"
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Poisoned:
		return "poisoned"
	case Cancelled:
		return "cancelled"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Outcome is how a Completion ended.
type Outcome struct {
	Kind Kind
	Err  error // the failure for Failed and Poisoned; the cause for Cancelled
}

// outcomeOf classifies err: nil succeeds, poison poisons, others fail.
func outcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Outcome{Kind: Succeeded}
	case ports.IsPoison(err):
		return Outcome{Kind: Poisoned, Err: err}
	}
	return Outcome{Kind: Failed, Err: err}
}

// notifier receives a Completion's outcome, exactly once.
type notifier interface{ completed(Outcome) }

type funcNotifier func(Outcome)

func (f funcNotifier) completed(o Outcome) { f(o) }

// Completion is the completion future of a delivery, of a batch, or of
// anything derived from them. It completes exactly once; the first outcome
// wins and is handed on (to the settlement of the delivery, to the parent
// of a split, to the members of a join). A second, different outcome
// returns ErrConflict and is reported; a repeated identical one returns
// ErrAlreadyCompleted; neither is handed on.
//
// A Completion is safe for concurrent use. Its zero value is not usable:
// completions come from a Pipeline, from Split and Join, or NewCompletion.
type Completion struct {
	mu      sync.Mutex
	kind    Kind
	err     error
	done    chan struct{} // made lazily by Done
	next    notifier
	report  func(error) // where conflicts go; may be nil
	pending int         // Split: children not yet completed (+1 while splitting)
	agg     Outcome     // Split: the worst child outcome so far
	part    bool        // made by Split, or derived from such a part (Part)
}

// NewCompletion returns a Completion that calls onDone with its outcome
// exactly once, from the goroutine that completed it. onDone must not block
// for long. Operators use it to build completions of their own.
func NewCompletion(onDone func(Outcome)) *Completion {
	return &Completion{next: funcNotifier(onDone)}
}

// Succeed completes c successfully.
func (c *Completion) Succeed() error { return c.complete(Outcome{Kind: Succeeded}) }

// Fail completes c with err: poison (ports.IsPoison) poisons, any other
// error fails (retryable). Fail(nil) is Succeed.
func (c *Completion) Fail(err error) error { return c.complete(outcomeOf(err)) }

// Cancel completes c as cancelled: nothing is settled, so the broker
// redelivers the message after the consumer stops.
func (c *Completion) Cancel(cause error) error {
	return c.complete(Outcome{Kind: Cancelled, Err: cause})
}

// Complete completes c with o (o.Kind must not be Pending).
func (c *Completion) Complete(o Outcome) error {
	if o.Kind == Pending || o.Kind > Cancelled {
		return fmt.Errorf("%w: cannot complete with %v", ports.ErrInvalid, o.Kind)
	}
	return c.complete(o)
}

func (c *Completion) complete(o Outcome) error {
	next, err := c.finish(o)
	if next != nil {
		next.completed(o)
	}
	return err
}

// finish moves c to o and returns the notifier to hand o to (nil when c
// was already complete), without calling it.
func (c *Completion) finish(o Outcome) (notifier, error) {
	c.mu.Lock()
	if c.kind != Pending {
		prev := c.kind
		c.mu.Unlock()
		if prev == o.Kind {
			return nil, ports.ErrAlreadyCompleted
		}
		err := &ConflictError{First: prev, Second: o}
		if c.report != nil {
			c.report(err)
		}
		return nil, err
	}
	c.kind, c.err = o.Kind, o.Err
	if c.done != nil {
		close(c.done)
	}
	next := c.next
	c.mu.Unlock()
	return next, nil
}

// Outcome returns c's outcome; Kind is Pending until c completes.
func (c *Completion) Outcome() Outcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Outcome{Kind: c.kind, Err: c.err}
}

// Done returns a channel closed when c completes, for use in select.
func (c *Completion) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.kind != Pending {
			close(c.done)
		}
	}
	return c.done
}

// ConflictError reports a second outcome that differs from the first.
type ConflictError struct {
	First  Kind
	Second Outcome
}

func (e *ConflictError) Error() string {
	s := fmt.Sprintf("completion already %v, refused %v", e.First, e.Second.Kind)
	if e.Second.Err != nil {
		s += " (" + e.Second.Err.Error() + ")"
	}
	return s
}

// Is makes errors.Is(err, ports.ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ports.ErrConflict }

// Split fans c out into n children: c completes when every child has
// completed, with the most severe child outcome (Poisoned, then Cancelled,
// then Failed, then Succeeded). Split(0) succeeds c at once, as a filter
// that drops the item would. Split must be called at most once, before c
// completes.
func (c *Completion) Split(n int) []*Completion {
	if n <= 0 {
		_ = c.Succeed()
		return nil
	}
	c.mu.Lock()
	c.pending += n
	c.mu.Unlock()
	kids := make([]Completion, n)
	out := make([]*Completion, n)
	for i := range kids {
		kids[i].next = (*splitParent)(c)
		kids[i].report = c.report
		kids[i].part = true
		out[i] = &kids[i]
	}
	return out
}

type splitParent Completion

func (p *splitParent) completed(o Outcome) {
	c := (*Completion)(p)
	c.mu.Lock()
	if severity(o.Kind) > severity(c.agg.Kind) {
		c.agg = o
	}
	c.pending--
	last := c.pending == 0
	agg := c.agg
	c.mu.Unlock()
	if last {
		if agg.Kind == Pending {
			agg.Kind = Succeeded
		}
		_ = c.complete(agg)
	}
}

func severity(k Kind) int {
	switch k {
	case Succeeded:
		return 1
	case Failed:
		return 2
	case Cancelled:
		return 3
	case Poisoned:
		return 4
	}
	return 0
}

// Join returns one Completion for many: its outcome completes every member
// the same way (a batch has one outcome), except an outcome carrying a
// *MemberOutcomes, which completes each member with its own. A member
// that was already completed reports its own conflict; the others still
// complete.
func Join(members ...*Completion) *Completion {
	// One allocation for the Completion and its members: next points into
	// it (a slice stored in the interface would be boxed apart).
	jc := &joinCompletion{js: members}
	j := &jc.c
	j.next = &jc.js
	for _, m := range members {
		if m.report != nil {
			j.report = m.report
			break
		}
	}
	return j
}

// joinCompletion is a Join's Completion together with its members.
type joinCompletion struct {
	c  Completion
	js joined
}

type joined []*Completion

func (js joined) completed(o Outcome) {
	if m := memberOutcomes(o); m != nil {
		js.completeEach(m) // outcomes.go: each member its own outcome
		return
	}
	// Members that are deliveries of one pipeline are handed to its
	// settlement engine together, so the batch is settled with one
	// Settle call; other members are completed one by one.
	var (
		p     *Pipeline
		roots []*root
	)
	for _, m := range js {
		next, _ := m.finish(o) // a conflict is reported by the member itself
		switch n := next.(type) {
		case nil:
		case *root:
			if p != nil && n.p != p {
				p.settleBatch(roots, o)
				roots = roots[:0]
			}
			p = n.p
			if roots == nil {
				roots = make([]*root, 0, len(js))
			}
			roots = append(roots, n)
		default:
			n.completed(o)
		}
	}
	if len(roots) > 0 {
		p.settleBatch(roots, o)
	}
}

// Derive returns a new Completion that calls onDone with its outcome, like
// NewCompletion, and reports its conflicts where c reports them (the
// pipeline's error handler and conflict count). Operators use it to
// interpose on an item's completion (timeouts, deduplication,
// classification).
func (c *Completion) Derive(onDone func(Outcome)) *Completion {
	return &Completion{next: funcNotifier(onDone), report: c.report, part: c.part}
}

// Part reports whether c settles only a part of a delivery: it was made
// by Split (FlatMap, an operator that fans out), or derived from such a
// part with Derive. A stage that records a delivery as handled once
// (inbox.Sink) must refuse parts: the first part would record the
// delivery, and the others would be taken for its redelivery.
func (c *Completion) Part() bool { return c.part }
