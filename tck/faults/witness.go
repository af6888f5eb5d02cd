package faults

import (
	"fmt"
	"sync"
	"time"
)

// witness keeps what the kit needs to judge an excuse: when each message
// was first sent, which messages reached a client (Target.Arrivals), and
// the windows of the scenario's faults.
type witness struct {
	hooked bool // Target.Arrivals is set: arrivals are known

	mu      sync.Mutex
	sentAt  map[string]time.Time // first send attempt
	arrived map[string]struct{}
	// newest is the first-send time of the most recently sent message
	// that reached a client so far.
	newest  time.Time
	windows []*faultWindow
}

// faultWindow is the time a fault could have made the broker drop a
// message in flight: from the first send of the newest message a client
// had received when the fault began (anything sent after it may still
// have been on its way), to the first arrival at a client of a message
// first sent after the fault healed (the flow was back end to end).
type faultWindow struct {
	name     string
	from     time.Time
	began    time.Time
	healed   time.Time // zero while the fault lasts
	resumed  time.Time // first arrival of a message sent after healed; zero until then
	arrivals int       // arrivals while the fault lasted
}

func newWitness(hooked bool) *witness {
	return &witness{hooked: hooked, sentAt: map[string]time.Time{}, arrived: map[string]struct{}{}}
}

// sent records the first send attempt of ids.
func (w *witness) sent(ids ...string) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if _, ok := w.sentAt[id]; !ok {
			w.sentAt[id] = now
		}
	}
}

// arrival records that id reached a client.
func (w *witness) arrival(id string) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.arrived[id] = struct{}{}
	if at, ok := w.sentAt[id]; ok && at.After(w.newest) {
		w.newest = at
	}
	sent, known := w.sentAt[id]
	for _, f := range w.windows {
		switch {
		case f.healed.IsZero():
			f.arrivals++
		case f.resumed.IsZero() && known && sent.After(f.healed):
			f.resumed = now // a message sent after the heal made it through
		}
	}
}

// begin opens a fault window now.
func (w *witness) begin(name string) *faultWindow {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	f := &faultWindow{name: name, from: now, began: now}
	if !w.newest.IsZero() && w.newest.Before(now) {
		f.from = w.newest
	}
	w.windows = append(w.windows, f)
	return f
}

// heal closes the fault of f: its window lasts until the next arrival.
func (w *witness) heal(f *faultWindow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f.healed.IsZero() {
		f.healed = time.Now()
	}
}

// reached reports whether id reached a client.
func (w *witness) reached(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.arrived[id]
	return ok
}

// neverArrived returns "" when arrivals are known and none of ids reached
// a client, else why not.
func (w *witness) neverArrived(ids []string) string {
	if !w.hooked {
		return "the target reports no arrivals (Target.Arrivals), so nothing proves these messages never reached a client"
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range ids {
		if _, ok := w.arrived[id]; ok {
			return fmt.Sprintf("message %s reached a client and the pipeline never settled it: the adapter lost it", id)
		}
	}
	return ""
}

// droppedInWindow returns "" when every id never reached a client and was
// first sent inside a fault window, else the first reason it cannot be
// excused.
func (w *witness) droppedInWindow(ids []string) string {
	if why := w.neverArrived(ids); why != "" {
		return why
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.windows) == 0 {
		return "no fault window was recorded"
	}
	for _, id := range ids {
		at, ok := w.sentAt[id]
		if !ok {
			return fmt.Sprintf("message %s was confirmed without a send the kit recorded", id)
		}
		if w.windowOf(at) == nil {
			return fmt.Sprintf("message %s was first sent at %s, outside every fault window (%s)", id, at.Format("15:04:05.000"), w.describeLocked())
		}
	}
	return ""
}

// windowOf returns the fault window at lies in; w.mu must be held.
func (w *witness) windowOf(at time.Time) *faultWindow {
	for _, f := range w.windows {
		end := f.resumed
		if end.IsZero() {
			end = f.healed
		}
		if end.IsZero() { // never healed: the fault lasted to the end
			end = time.Now()
		}
		if !at.Before(f.from) && !at.After(end) {
			return f
		}
	}
	return nil
}

// describe prints the fault windows.
func (w *witness) describe() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.describeLocked()
}

func (w *witness) describeLocked() string {
	s := ""
	for i, f := range w.windows {
		if i > 0 {
			s += "; "
		}
		s += fmt.Sprintf("%s from %s (fault at %s", f.name, f.from.Format("15:04:05.000"), f.began.Format("15:04:05.000"))
		if !f.healed.IsZero() {
			s += ", healed " + f.healed.Format("15:04:05.000")
		}
		if !f.resumed.IsZero() {
			s += ", flow back " + f.resumed.Format("15:04:05.000")
		}
		s += ")"
	}
	if s == "" {
		return "none"
	}
	return s
}
