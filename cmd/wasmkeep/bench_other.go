//go:build !linux

package main

import "syscall"

// plainProcAttr: elsewhere the plain server of --compare is stopped by its
// parent only.
func plainProcAttr() *syscall.SysProcAttr { return nil }
