package operators

import (
	"context"
	"sync"
	"time"

	"github.com/sluicemq/sluice/operators/internal/lru"
)

// Claim is a DedupeStore's answer to a claim on a key.
type Claim int

const (
	// ClaimFresh: the key is unknown; the caller now holds it and must
	// Commit or Release it.
	ClaimFresh Claim = iota + 1
	// ClaimDone: the key was committed before: a duplicate of a message
	// already handled.
	ClaimDone
	// ClaimBusy: another holder (another process sharing the store) holds
	// the key and has not committed or released it yet.
	ClaimBusy
)

// DedupeStore remembers which message keys were handled. Implementations
// must be safe for concurrent use. A store shared by many processes (a
// database, a cache) lets a whole group skip duplicates; the in-memory
// store covers one process.
type DedupeStore interface {
	// Claim asks to handle key: ClaimFresh (now held by the caller),
	// ClaimDone (handled before) or ClaimBusy (held elsewhere).
	Claim(ctx context.Context, key string) (Claim, error)
	// Commit records key as handled, after its handling succeeded.
	Commit(ctx context.Context, key string) error
	// Release forgets a claim whose handling did not succeed, so that a
	// redelivery is handled again.
	Release(ctx context.Context, key string) error
}

// MemoryStoreOptions bound a MemoryStore. Zero fields take the defaults.
type MemoryStoreOptions struct {
	// MaxEntries bounds the handled keys remembered. Default 100000.
	MaxEntries int
	// TTL forgets a handled key this long after it was committed: a
	// duplicate arriving later is handled again. Default 1h.
	TTL time.Duration
}

// MemoryStore is an in-process DedupeStore bounded by size and age: it
// remembers the most recently committed keys, up to MaxEntries, each for
// TTL. Keys held (claimed, not yet committed) are kept apart and are
// bounded by the in-flight limit of the pipelines using the store. The zero
// value is usable, with the default bounds.
type MemoryStore struct {
	mu   sync.Mutex
	done *lru.Cache[string, struct{}]
	held map[string]struct{}
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(o MemoryStoreOptions) *MemoryStore {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 100_000
	}
	if o.TTL <= 0 {
		o.TTL = time.Hour
	}
	return &MemoryStore{done: lru.New[string, struct{}](o.MaxEntries, o.TTL, nil), held: map[string]struct{}{}}
}

// init gives a zero MemoryStore its default bounds; s.mu must be held.
func (s *MemoryStore) init() {
	if s.done == nil {
		s.done = NewMemoryStore(MemoryStoreOptions{}).done
		s.held = map[string]struct{}{}
	}
}

// Claim implements DedupeStore.
func (s *MemoryStore) Claim(_ context.Context, key string) (Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if _, ok := s.done.Get(key); ok {
		return ClaimDone, nil
	}
	if _, ok := s.held[key]; ok {
		return ClaimBusy, nil
	}
	s.held[key] = struct{}{}
	return ClaimFresh, nil
}

// Commit implements DedupeStore.
func (s *MemoryStore) Commit(_ context.Context, key string) error {
	s.mu.Lock()
	s.init()
	delete(s.held, key)
	s.done.Put(key, struct{}{})
	s.mu.Unlock()
	return nil
}

// Release implements DedupeStore.
func (s *MemoryStore) Release(_ context.Context, key string) error {
	s.mu.Lock()
	s.init()
	delete(s.held, key)
	s.mu.Unlock()
	return nil
}

// Len returns the number of handled keys remembered.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	return s.done.Len()
}
