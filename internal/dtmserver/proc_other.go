//go:build !linux

package dtmserver

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
