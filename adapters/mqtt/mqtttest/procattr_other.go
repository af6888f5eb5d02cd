//go:build !linux

package mqtttest

import "syscall"

// procAttr puts the broker in its own process group. Without Linux's
// parent-death signal, Cleanup's stop by PID is what ends it.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
