//go:build unix && !linux

package chaos

import "syscall"

// sysProcAttr puts a child in its own process group. Without Pdeathsig outside Linux, workers
// still exit when their stdin (a pipe from the harness) closes.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
