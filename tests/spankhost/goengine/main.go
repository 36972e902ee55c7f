// Command goengine is a test engine for the spankhost tests, in Go. Built as a
// program it is a stand-in launcher: it reads the request on fd 0 and copies the
// file named by the request's snapshot= to fd 3 as the plan. Built as a c-shared
// library (the same export as the real engine) it is the negative control that a
// host loads into itself: a Go runtime there is what the safety tests must notice.
package main

import "C"

import (
	"os"
	"strings"
	"syscall"
)

//export gpubind_engine_run
func gpubind_engine_run(req *C.char, fd C.int) (rc C.int) {
	return C.int(run(C.GoString(req), int(fd)))
}

func run(req string, fd int) int {
	var path string
	for _, l := range strings.Split(req, "\n") {
		if v, ok := strings.CutPrefix(l, "snapshot="); ok {
			path = v
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for len(data) > 0 {
		n, err := syscall.Write(fd, data)
		if err != nil {
			return -1
		}
		data = data[n:]
	}
	return 0
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "plan" {
		return
	}
	req, err := os.ReadFile("/dev/stdin")
	if err != nil {
		os.Exit(2)
	}
	if run(string(req), 3) != 0 {
		os.Exit(1)
	}
}
