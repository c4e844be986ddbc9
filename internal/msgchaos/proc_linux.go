//go:build linux

package msgchaos

import "syscall"

// sysProcAttr puts a consumer in its own process group and has the kernel SIGKILL it when the
// harness dies, so that nothing outlives an interrupted run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
