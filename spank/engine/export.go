package main

// Only libc headers here: this preamble is copied into the generated header, and
// consumers must not need NVML or PMIx headers.

/*
#include <stdlib.h>
#include <string.h>
*/
import "C"

import (
	"bytes"
	"errors"
	"fmt"
	"runtime/debug"
	"syscall"
	"unsafe"

	"github.com/gpubind/gpubind/gpubind"
)

// fdWriter writes to a raw fd without an *os.File, whose finalizer would close the
// caller's pipe.
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := syscall.Write(int(w), p[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, errors.New("short write")
		}
		n += m
	}
	return n, nil
}

// runToFD runs one request and writes the table to fd. A panic anywhere becomes an
// error table; the table is written only after it is complete.
func runToFD(request string, w fdWriter) (rc int) {
	var buf bytes.Buffer
	defer func() {
		if p := recover(); p != nil {
			buf.Reset()
			_ = gpubind.ErrorTable(fmt.Errorf("internal error in the gpubind engine: %v", p)).Encode(&buf)
			_, _ = w.Write(buf.Bytes())
			rc = -2
		}
	}()
	err := handle(request, &buf)
	if _, werr := w.Write(buf.Bytes()); werr != nil {
		return -3
	}
	if err != nil {
		return -1
	}
	return 0
}

// gpubind_engine_run handles one request (protocol v1 section 1) and writes the
// decision table to out_fd. It returns 0 on success and a negative value on failure;
// the table then has status error.
//
//export gpubind_engine_run
func gpubind_engine_run(request *C.char, outFD C.int) (rc C.int) {
	// A run lives a few ms and allocates about 150 kB: a garbage
	// collection there is pure cost. RLIMIT_CPU and the parent's deadline
	// still bound it. (Only here: srun's in-process option check keeps GC.)
	debug.SetGCPercent(-1)
	defer func() {
		if recover() != nil {
			rc = -2
		}
	}()
	if request == nil {
		return C.int(runToFD("", fdWriter(outFD)))
	}
	n := C.strnlen(request, maxRequestBytes+1)
	return C.int(runToFD(C.GoStringN(request, C.int(n)), fdWriter(outFD)))
}

// gpubind_engine_check validates an option value (srun/sbatch/salloc side). It returns 0
// when the value is good ("off" and "help" are good), and -1 with a NUL-terminated
// message in errbuf (at most errlen bytes) when not.
//
//export gpubind_engine_check
func gpubind_engine_check(option *C.char, errbuf *C.char, errlen C.int) (rc C.int) {
	defer func() {
		if p := recover(); p != nil {
			writeErr(errbuf, errlen, fmt.Sprintf("internal error in the gpubind engine: %v", p))
			rc = -2
		}
	}()
	if option == nil {
		writeErr(errbuf, errlen, "no option text")
		return -1
	}
	n := C.strnlen(option, gpubind.MaxOptionLen+1)
	if err := checkOption(C.GoStringN(option, C.int(n))); err != nil {
		writeErr(errbuf, errlen, err.Error())
		return -1
	}
	return 0
}

// checkOption validates an option value as gpubind_engine_check does.
func checkOption(opt string) error {
	_, err := gpubind.ParseOption(opt)
	return err
}

func writeErr(buf *C.char, n C.int, msg string) {
	if buf == nil || n <= 0 {
		return
	}
	msg = gpubind.CleanMessage(msg)
	if len(msg) > int(n)-1 {
		msg = msg[:int(n)-1]
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	copy(dst, msg)
	dst[len(msg)] = 0
}

var helpText *C.char

// gpubind_engine_help returns static text listing the policies and flags. The caller
// must not free it.
//
//export gpubind_engine_help
func gpubind_engine_help() *C.char {
	defer func() { _ = recover() }()
	if helpText == nil {
		helpText = C.CString(gpubind.PolicyHelpText)
	}
	return helpText
}
