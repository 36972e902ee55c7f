// Command goengine is a test engine for the spankhost tests: a Go c-shared
// library with the engine's export. It copies the file named by the
// request's snapshot= to the pipe as the plan. Loading it starts a Go
// runtime, which is what the safety tests must keep out of the host.
package main

import "C"

import (
	"os"
	"strings"
)

//export gpubind_engine_run
func gpubind_engine_run(req *C.char, fd C.int) (rc C.int) {
	defer func() {
		if recover() != nil {
			rc = -1
		}
	}()
	var path string
	for _, l := range strings.Split(C.GoString(req), "\n") {
		if v, ok := strings.CutPrefix(l, "snapshot="); ok {
			path = v
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	out := os.NewFile(uintptr(fd), "plan")
	if _, err := out.Write(data); err != nil {
		return -1
	}
	return 0
}

func main() {}
