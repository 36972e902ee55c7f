package ncclid

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include <string.h>
// #include "getid.h"
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// defaultLibrary is what a Library dlopens when the process has no ncclGetUniqueId of its own.
const defaultLibrary = "libnccl.so.2"

// Library finds ncclGetUniqueId on first use: the process's own (dlsym RTLD_DEFAULT), else the
// one in a library it dlopens with RTLD_LOCAL. Ranks that never create an ID never touch NCCL.
type Library struct {
	name string
	mu   sync.Mutex
	fn   unsafe.Pointer
}

// Lib returns a Library for library ("" means defaultLibrary); its NewID is a Generator.
func Lib(library string) *Library {
	if library == "" {
		library = defaultLibrary
	}
	return &Library{name: library}
}

// NewID creates an ID with the library's ncclGetUniqueId, resolving it first if need be.
func (l *Library) NewID() (ID, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fn == nil {
		cl := C.CString(l.name)
		defer C.free(unsafe.Pointer(cl))
		var from C.int
		var msg [512]C.char
		p := C.ni_resolve(cl, &from, &msg[0], C.size_t(len(msg)))
		if p == nil {
			return ID{}, fmt.Errorf("ncclid: %s", C.GoString(&msg[0]))
		}
		l.fn = p
	}
	return call(l.fn)
}

// Resolved returns the ncclGetUniqueId NewID uses, or nil before NewID found one.
func (l *Library) Resolved() unsafe.Pointer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fn
}

// InProcess returns the process's own ncclGetUniqueId (dlsym RTLD_DEFAULT), or nil. It loads
// nothing. An NCCL linked statically into the program is invisible to it.
func InProcess() unsafe.Pointer { return C.ni_in_process() }

// Origin says which NCCL made an ID.
type Origin struct {
	Library string // the file holding the ncclGetUniqueId used; "" if unknown
	Version int    // that file's ncclGetVersion(), e.g. 22803 for 2.28.3; 0 if unknown
}

// versionString formats an NCCL version code: 22803 is 2.28.3 (NCCL >= 2.9 multiplies the
// major by 10000, older ones by 1000: 2804 is 2.8.4); "unknown" for 0.
func versionString(v int) string {
	switch {
	case v <= 0:
		return "unknown"
	case v >= 10000:
		return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
}

func (o Origin) String() string {
	lib := o.Library
	if lib == "" {
		lib = "an unknown file"
	}
	if o.Version == 0 {
		return fmt.Sprintf("NCCL of unknown version in %s", lib)
	}
	return fmt.Sprintf("NCCL %s (%d) in %s", versionString(o.Version), o.Version, lib)
}

// Describe returns the Origin of fn, an ncclGetUniqueId: the loaded file that holds it and
// that same file's ncclGetVersion, when it exports one. It loads nothing.
func Describe(fn unsafe.Pointer) Origin {
	if fn == nil {
		return Origin{}
	}
	var path [4096]C.char
	var v C.int
	if C.ni_describe(fn, &path[0], C.size_t(len(path)), &v) != 0 {
		return Origin{}
	}
	return Origin{Library: C.GoString(&path[0]), Version: int(v)}
}

// Func returns a Generator calling fn, a C function with ncclGetUniqueId's signature
// (ncclResult_t (*)(ncclUniqueId *)).
func Func(fn unsafe.Pointer) Generator {
	return func() (ID, error) {
		if fn == nil {
			return ID{}, fmt.Errorf("ncclid: the ncclGetUniqueId function passed is NULL")
		}
		return call(fn)
	}
}

func call(fn unsafe.Pointer) (ID, error) {
	buf := C.malloc(Bytes)
	if buf == nil {
		return ID{}, fmt.Errorf("ncclid: out of memory")
	}
	defer C.free(buf)
	C.memset(buf, 0, Bytes)
	if rc := C.ni_call(fn, buf); rc != 0 {
		return ID{}, fmt.Errorf("ncclid: ncclGetUniqueId returned ncclResult_t %d (expected 0, ncclSuccess)", int(rc))
	}
	var id ID
	copy(id[:], C.GoBytes(buf, Bytes))
	return id, nil
}
