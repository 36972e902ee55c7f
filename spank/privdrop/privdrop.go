// Package privdrop is the launcher's change from root to the job's user. It exists apart
// from the engine so that the spankhost tests' stand-in launcher drops privileges with the
// very same code (tests/spankhost/goengine).
package privdrop

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Drop becomes uid/gid (with no supplementary groups) when running as root. Go's syscall
// versions change every thread of the process. uid < 0 keeps the current identity.
//
// The kernel clears the parent-death signal (PR_SET_PDEATHSIG) when the uid changes, so a
// launcher that would die with slurmstepd before the drop would outlive it after. Drop
// sets the signal again when the process had one, and fails when the parent is already
// gone (the process was reparented between the two): the caller then exits.
func Drop(uid, gid int) error {
	if uid < 0 || os.Geteuid() != 0 {
		return nil
	}
	var sig int32
	if err := unix.Prctl(unix.PR_GET_PDEATHSIG, uintptr(unsafe.Pointer(&sig)), 0, 0, 0); err != nil {
		return fmt.Errorf("dropping root: reading the parent-death signal: %w", err)
	}
	parent := os.Getppid()
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
	if sig != 0 {
		// Any thread's parent-death signal kills the whole process; Go never ends the
		// thread this runs on (no LockOSThread here).
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(sig), 0, 0, 0); err != nil {
			return fmt.Errorf("dropping root: setting the parent-death signal again: %w", err)
		}
		if os.Getppid() != parent {
			return fmt.Errorf("dropping root: the parent (pid %d) is gone", parent)
		}
	}
	return nil
}
