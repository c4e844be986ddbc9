//go:build linux

package chaos

import "syscall"

// sysProcAttr puts a child in its own process group and asks the kernel to SIGKILL it when the
// harness dies, so that nothing outlives a crashed or interrupted run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
