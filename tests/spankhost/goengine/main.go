// Command goengine is a test engine for the spankhost tests, in Go. Built as a
// program it is a stand-in launcher: it reads the request on fd 0 and copies the
// snapshot (fd 4 when the request says snapshot_fd=4, as the real launcher reads it,
// else the file named by snapshot=) to fd 3 as the plan. A snapshot that starts with
// "pause-after-drop" makes it drop to the request's uid/gid with the real launcher's
// code (package privdrop) and then wait to be killed; built with the tag
// gpubind_test_launcher it also starts as the real launcher does (launcherc.go), so
// TestLauncherDiesWithParentAfterDrop runs the real start and drop. Built as a c-shared
// library (the same export as the real engine) it is the negative control that a
// host loads into itself: a Go runtime there is what the safety tests must notice.
package main

import "C"

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpubind/gpubind/spank/privdrop"
)

//export gpubind_engine_run
func gpubind_engine_run(req *C.char, fd C.int) (rc C.int) {
	return C.int(run(C.GoString(req), int(fd)))
}

func run(req string, fd int) int {
	data, err := snapshot(req)
	if err != nil {
		return -1
	}
	if bytes.HasPrefix(data, []byte("pause-after-drop")) {
		uid, _ := strconv.Atoi(value(req, "uid"))
		gid, _ := strconv.Atoi(value(req, "gid"))
		if err := privdrop.Drop(uid, gid); err != nil {
			os.Exit(3)
		}
		for {
			time.Sleep(time.Hour)
		}
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

func value(req, key string) string {
	for _, l := range strings.Split(req, "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			return v
		}
	}
	return ""
}

func snapshot(req string) ([]byte, error) {
	if fd := value(req, "snapshot_fd"); fd != "" {
		n, err := strconv.Atoi(fd)
		if err != nil {
			return nil, err
		}
		return io.ReadAll(os.NewFile(uintptr(n), "snapshot"))
	}
	return os.ReadFile(value(req, "snapshot"))
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
