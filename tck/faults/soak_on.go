//go:build soak

package faults

// soakEnabled: built with -tags soak, Run runs the soak scenario.
const soakEnabled = true
