package dtmserver

import "syscall"

// sysProcAttr puts the server in its own process group and asks the kernel to kill it if the parent
// dies without stopping it (a test binary killed on timeout), so no server is left behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
