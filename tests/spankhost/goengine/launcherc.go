//go:build gpubind_test_launcher

package main

// The real launcher's C start (spank/engine/launcher.c: parent-death signal, fds, signals,
// limits), compiled in as gpubind-launcher has it.

// #cgo CFLAGS: -I${SRCDIR}/../../../spank/engine
// #include "launcher.c"
import "C"
