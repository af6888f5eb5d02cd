package kit

import (
	"fmt"
	"sync/atomic"

	"github.com/sluicemq/sluice/ports"
)

// State is where a delivery is in its settlement.
type State uint8

const (
	// Out: handed to the core, not settled.
	Out State = iota
	// Settling: a Settle call is carrying out an action.
	Settling
	// Done: the action was accepted; the delivery is settled.
	Done
)

func (s State) String() string {
	switch s {
	case Out:
		return "out"
	case Settling:
		return "settling"
	case Done:
		return "done"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Claim is the settlement state of one delivery: Out, then Settling with
// an action, then Done with it (or back to Out when the action failed).
// Embed it in the value behind Delivery.Handle and return it from Claim
// (see Claimer); it lives and dies with the delivery, so tracking costs no
// map and no lock. The zero value is Out.
type Claim struct {
	v atomic.Uint32 // state<<8 | action
}

// Claimer is implemented by a Delivery.Handle that carries its Claim.
type Claimer interface {
	Claim() *Claim
}

// State returns the claim's state and, unless Out, its action.
func (c *Claim) State() (State, ports.Action) {
	v := c.v.Load()
	return State(v >> 8), ports.Action(v & 0xff)
}

// Begin moves the claim from Out to Settling with action a. A claim that
// is Settling or Done already returns an error wrapping
// ports.ErrAlreadyCompleted for the same action and ports.ErrConflict for
// a different one.
func (c *Claim) Begin(a ports.Action) error {
	if c.v.CompareAndSwap(0, uint32(Settling)<<8|uint32(a)&0xff) {
		return nil
	}
	st, prev := c.State()
	if prev == a {
		return fmt.Errorf("%w: %v is %s already", ports.ErrAlreadyCompleted, a, st)
	}
	return fmt.Errorf("%w: %v asked, %v is %s already", ports.ErrConflict, a, prev, st)
}

// End finishes a Begin: Done when ok, back to Out (settle again later)
// when not.
func (c *Claim) End(ok bool) {
	if ok {
		_, a := c.State()
		c.v.Store(uint32(Done)<<8 | uint32(a)&0xff)
		return
	}
	c.v.Store(0)
}

// Tracker claims a batch of deliveries all or nothing. Its zero value
// finds each delivery's Claim through Delivery.Handle implementing
// Claimer.
type Tracker struct {
	// Lookup returns d's claim, or an error when d was not received by
	// this subscription (wrap ports.ErrInvalid, or an adapter error such
	// as "delivery lost with its channel"). Default: d.Handle.(Claimer).
	Lookup func(d *ports.Delivery) (*Claim, error)
}

func (t *Tracker) lookup(d *ports.Delivery) (*Claim, error) {
	if t != nil && t.Lookup != nil {
		return t.Lookup(d)
	}
	if c, ok := d.Handle.(Claimer); ok && c != nil {
		if cl := c.Claim(); cl != nil {
			return cl, nil
		}
	}
	return nil, &ports.ValueError{Field: "Delivery.Handle", Reason: fmt.Sprintf("of message %q was not handed out by this subscription", d.ID)}
}

// Begin claims every delivery of ds for action a (see Claim.Begin). On the
// first failure it returns the claims it made to Out and returns the
// error, naming the message: the batch has one outcome. A delivery listed
// twice in ds is a repeated completion.
func (t *Tracker) Begin(ds []*ports.Delivery, a ports.Action) error {
	for i, d := range ds {
		c, err := t.lookup(d)
		if err == nil {
			err = c.Begin(a)
		}
		if err != nil {
			t.end(ds[:i], false)
			if d == nil {
				return fmt.Errorf("settle delivery #%d of %d (nil): %w", i, len(ds), err)
			}
			return fmt.Errorf("settle %q: %w", d.ID, err)
		}
	}
	return nil
}

// End finishes a successful Begin: every delivery of ds Done when ok, Out
// again when not.
func (t *Tracker) End(ds []*ports.Delivery, ok bool) { t.end(ds, ok) }

func (t *Tracker) end(ds []*ports.Delivery, ok bool) {
	for _, d := range ds {
		if c, err := t.lookup(d); err == nil {
			c.End(ok)
		}
	}
}
