package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestTakeGivesDistinctListenablePortsBelowTheEphemeralRange(t *testing.T) {
	ps, err := Take(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		if seen[p] || p < 10000 || p >= ephemeralLow() {
			t.Fatalf("ports %v: want 8 distinct ports in 10000..%d", ps, ephemeralLow()-1)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free after Take: %v", p, err)
		}
		l.Close()
	}
}
