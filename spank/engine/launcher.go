//go:build gpubind_launcher

package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"

	"github.com/gpubind/gpubind/gpubind"
)

// The program gpubind-launcher: this package built with the tag gpubind_launcher. The
// plugin in slurmstepd starts it with posix_spawn (spank/frontend/child.c), never a fork
// of itself: argv "plan PPID TIMEOUT_MS", a fixed environment, the request on fd 0 (a
// sealed memfd), the table to write on fd 3 (a pipe). launcher.c has already run, in C,
// before the Go runtime started: signals, parent-death signal, oom_score_adj, rlimits
// and every other fd closed.
const (
	requestFD = 0
	tableFD   = 3
)

func main() {
	// It lives a few ms and allocates about 150 kB: a garbage collection here is pure
	// cost (the plugin also passes GOGC=off). RLIMIT_CPU and the parent's deadline
	// bound it.
	debug.SetGCPercent(-1)
	req, err := readRequest(requestFD)
	if err != nil {
		var buf bytes.Buffer
		_ = gpubind.ErrorTable(err).Encode(&buf)
		_, _ = fdWriter(tableFD).Write(buf.Bytes())
		os.Exit(2)
	}
	if runToFD(req, fdWriter(tableFD)) != 0 {
		os.Exit(1)
	}
	os.Exit(0)
}

// readRequest reads fd to its end: at most maxRequestBytes.
func readRequest(fd int) (string, error) {
	buf := make([]byte, 0, 16<<10)
	for {
		if len(buf) == cap(buf) {
			if len(buf) > maxRequestBytes {
				return "", fmt.Errorf("launcher: request on fd %d is more than %d bytes", fd, maxRequestBytes)
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("launcher: reading the request on fd %d: %v", fd, err)
		}
		if n == 0 {
			return string(buf), nil
		}
		buf = buf[:len(buf)+n]
	}
}
