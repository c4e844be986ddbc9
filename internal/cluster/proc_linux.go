//go:build linux

package cluster

import "syscall"

// sysProcAttr puts a child in its own process group and asks the kernel to SIGKILL it when this
// process dies, so that nothing outlives a crashed or interrupted test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
