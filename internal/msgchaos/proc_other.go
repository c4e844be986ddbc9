//go:build unix && !linux

package msgchaos

import "syscall"

// sysProcAttr puts a consumer in its own process group; without Pdeathsig outside Linux, consumers
// still exit when their stdin (a pipe from the harness) closes.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
