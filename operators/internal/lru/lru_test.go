package lru

import (
	"testing"
	"time"
)

func TestBoundedBySizeOldestWriteFirst(t *testing.T) {
	c := New[string, int](2, 0, func() int64 { return 0 })
	c.Put("a", 1)
	c.Put("b", 2)
	c.Put("a", 3) // rewrite makes a the newest
	c.Put("c", 4) // evicts b
	if _, ok := c.Get("b"); ok {
		t.Fatal("b should have been evicted as the oldest write")
	}
	if v, ok := c.Get("a"); !ok || v != 3 {
		t.Fatalf("a = %d,%v; want 3,true", v, ok)
	}
	if c.Len() != 2 {
		t.Fatalf("Len = %d, want 2", c.Len())
	}
}

func TestExpiresByAgeOfLastWrite(t *testing.T) {
	var now int64
	c := New[string, int](0, time.Second, func() int64 { return now })
	c.Put("a", 1)
	now = int64(500 * time.Millisecond)
	c.Put("b", 2)
	if _, ok := c.Get("a"); !ok {
		t.Fatal("a expired early")
	}
	now = int64(time.Second)
	if _, ok := c.Get("a"); ok {
		t.Fatal("a should expire a second after its write")
	}
	c.Put("c", 3)
	now = int64(1600 * time.Millisecond)
	c.Trim()
	if c.Len() != 1 {
		t.Fatalf("Len = %d after trim, want 1 (only c)", c.Len())
	}
	c.Delete("c")
	if c.Len() != 0 {
		t.Fatal("Delete left an entry")
	}
}
