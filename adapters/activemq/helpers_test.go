package activemq_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/adapters/activemq"
)

var nsSeq atomic.Uint64

// namespace returns a namespace no other test of this run uses.
func namespace(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, time.Now().UnixNano()%1e6, nsSeq.Add(1))
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// rawLog routes a raw go-stomp client's log lines to slog (debug level),
// as the adapter does, instead of go-stomp's standard-log "INFO:" lines.
var rawLog = activemq.StompLogger(slog.Default())
