//go:build unix && !linux

package cluster

import "syscall"

// sysProcAttr puts a child in its own process group. Without Linux's parent-death signal, a child
// of a process killed outright outlives it; Stop and the tests' cleanups end them otherwise.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
