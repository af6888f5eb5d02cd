package attempts_test

import (
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/operators/attempts"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCountsPerIDAndForgets(t *testing.T) {
	c := attempts.New(attempts.Options{})
	if c.Add("a") != 1 || c.Add("a") != 2 || c.Add("b") != 1 {
		t.Fatal("counts do not grow by one per Add")
	}
	if c.Get("a") != 2 || c.Get("zz") != 0 {
		t.Fatalf("Get(a)=%d Get(zz)=%d, want 2 and 0", c.Get("a"), c.Get("zz"))
	}
	c.Forget("a")
	if c.Get("a") != 0 {
		t.Fatal("Forget kept the count")
	}
}

func TestBoundedMemory(t *testing.T) {
	c := attempts.New(attempts.Options{MaxEntries: 100})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				c.Add(fmt.Sprintf("%d-%d", g, i))
			}
		}()
	}
	wg.Wait()
	if c.Len() != 100 {
		t.Fatalf("Len = %d, want the bound 100", c.Len())
	}
}

func ExampleCounter() {
	c := attempts.New(attempts.Options{MaxEntries: 10_000})
	// The adapter requeues message m-1 twice, then delivers it again.
	c.Add("m-1")
	c.Add("m-1")
	fmt.Println("redelivery count:", c.Get("m-1"))
	c.Forget("m-1") // acked
	fmt.Println("after ack:", c.Get("m-1"))
	// Output:
	// redelivery count: 2
	// after ack: 0
}
