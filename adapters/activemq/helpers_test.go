package activemq_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

var nsSeq atomic.Uint64

// namespace returns a namespace no other test of this run uses.
func namespace(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, time.Now().UnixNano()%1e6, nsSeq.Add(1))
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
