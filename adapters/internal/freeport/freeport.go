// Package freeport picks TCP ports on 127.0.0.1 for test brokers that must
// listen on a port known before they start (a broker restarted on the
// same port, a configuration file written first).
//
// A port the kernel hands out for "127.0.0.1:0" comes from the ephemeral
// range, which every outgoing connection of every process also draws its
// local port from: between closing the probe and the broker's bind, a
// client's connect can take it ("address already in use"), and a broker
// restarted on it later can find it taken the same way. freeport picks
// ports below the ephemeral range instead, where no connect lands, at
// random so that test binaries running at once rarely try the same one,
// and checks each by listening on it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Take returns k distinct ports on 127.0.0.1 that were free a moment ago,
// outside the kernel's ephemeral range.
func Take(k int) ([]int, error) {
	lo := ephemeralLow()
	const floor = 10000 // below: well-known and registered services' ports
	if lo-floor < 1000 {
		return nil, fmt.Errorf("freeport: the ephemeral range starts at %d, too low to pick ports below it", lo)
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, k)
	for tries := 0; len(ports) < k; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("freeport: no free port in %d..%d after %d tries", floor, lo-1, tries)
		}
		p := floor + rand.IntN(lo-floor)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l) // held until all k are picked: distinct
		ports = append(ports, p)
	}
	return ports, nil
}

// One returns one port as Take does.
func One() (int, error) {
	ps, err := Take(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
