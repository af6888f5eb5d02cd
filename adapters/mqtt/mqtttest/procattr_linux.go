package mqtttest

import "syscall"

// procAttr puts the broker in its own process group (so a stop reaches
// every process of it) and has the kernel kill it when the test process
// dies, even by SIGKILL: a broker a test started never outlives the test.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
