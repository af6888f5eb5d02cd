package kit

import (
	"crypto/sha256"
	"encoding/hex"
)

// ShortName returns name when it has at most max bytes (max > 33), else
// its first max-33 bytes, "#" and 32 hex digits of its SHA-256: a name
// within a broker's length limit (a queue, a topic, a client id) that
// stays distinct and the same in every process.
func ShortName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:max-33] + "#" + hex.EncodeToString(sum[:16])
}
