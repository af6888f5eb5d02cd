package kit

import (
	"sync"
	"time"
)

// Ensured declares a broker resource a driver uses (a topic, a queue, a
// route) on its first use, once per key, and again when the last
// declaration is older than Refresh (for resources the broker expires when
// idle) or was forgotten (a publish found it gone). The zero value never
// declares a key twice until Forget. Declarations run one at a time. It
// is safe for concurrent use.
type Ensured[K comparable] struct {
	Refresh time.Duration    // 0: never again
	Now     func() time.Time // the clock of Refresh; nil: time.Now
	mu      sync.Mutex
	at      map[K]time.Time
}

// Ensure calls declare unless k was declared lately; a failed declaration
// is tried again by the next Ensure.
func (e *Ensured[K]) Ensure(k K, declare func() error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if e.Now != nil {
		now = e.Now()
	}
	if at, ok := e.at[k]; ok && (e.Refresh <= 0 || now.Sub(at) <= e.Refresh) {
		return nil
	}
	if err := declare(); err != nil {
		return err
	}
	if e.at == nil {
		e.at = make(map[K]time.Time)
	}
	e.at[k] = now
	return nil
}

// Forget makes the next Ensure of k declare it again.
func (e *Ensured[K]) Forget(k K) {
	e.mu.Lock()
	delete(e.at, k)
	e.mu.Unlock()
}
