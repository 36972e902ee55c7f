package gpubind_test

import "golang.org/x/sys/unix"

func mknod(path string, minor int) error {
	return unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(minor))))
}
