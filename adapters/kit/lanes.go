package kit

import "sync"

// Lanes runs jobs on a fixed number of goroutines, a stream's jobs always
// on the same one, in the order handed: the work of several streams (a
// poll's partitions) runs in parallel, each stream's in order. Do is
// called from one goroutine at a time; Wait and Close from any. Create it
// with [NewLanes].
type Lanes struct {
	lanes   []chan func()
	running sync.WaitGroup // the goroutines
	busy    sync.WaitGroup // jobs handed and not run yet
}

// NewLanes starts n goroutines (at least one).
func NewLanes(n int) *Lanes {
	l := &Lanes{lanes: make([]chan func(), max(n, 1))}
	for i := range l.lanes {
		l.lanes[i] = make(chan func(), 16)
		l.running.Go(func() {
			for job := range l.lanes[i] {
				job()
				l.busy.Done()
			}
		})
	}
	return l
}

// Do hands job to the lane of stream (not negative); it waits only while
// that lane holds 16 jobs not started.
func (l *Lanes) Do(stream int, job func()) {
	l.busy.Add(1)
	l.lanes[stream%len(l.lanes)] <- job
}

// Wait returns once every job handed before it has run.
func (l *Lanes) Wait() { l.busy.Wait() }

// Close runs what was handed and ends the goroutines; Do must not be
// called after it.
func (l *Lanes) Close() {
	for _, c := range l.lanes {
		close(c)
	}
	l.running.Wait()
}
