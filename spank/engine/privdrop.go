package main

import (
	"fmt"
	"os"
	"syscall"
)

// dropPrivileges becomes uid/gid (with no supplementary groups) when running as root,
// before any user-controlled input is parsed. Go's syscall versions change every
// thread of the process. uid < 0 keeps the current identity.
func dropPrivileges(uid, gid int) error {
	if uid < 0 || os.Geteuid() != 0 {
		return nil
	}
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("dropping root: setgroups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("dropping root: setresgid(%d): %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("dropping root: setresuid(%d): %w", uid, err)
	}
	if os.Geteuid() != uid || os.Getegid() != gid {
		return fmt.Errorf("dropping root: still euid %d egid %d", os.Geteuid(), os.Getegid())
	}
	return nil
}
