package main

import "syscall"

// plainProcAttr makes the plain server of --compare die with its parent.
func plainProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
