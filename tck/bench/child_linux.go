package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills a contender process when the bench dies.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
