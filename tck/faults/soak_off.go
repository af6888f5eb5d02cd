//go:build !soak

package faults

// soakEnabled: without -tags soak, Run skips the soak scenario.
const soakEnabled = false
