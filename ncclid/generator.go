package ncclid

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include <string.h>
// #include "getid.h"
import "C"

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"
)

// The libraries a Library dlopens by default when the process has no ncclGetUniqueId of its
// own: NCCL's and RCCL's. RCCL (ROCm) exports the same symbols and a 128-byte ID of the same
// form, under its own name; it is not an ABI drop-in for libnccl.so.2.
const (
	defaultLibrary = "libnccl.so.2"
	rcclLibrary    = "librccl.so.1"
)

// Library finds ncclGetUniqueId on first use (docs/helper.md "Where the ID comes from"): the
// process's own (dlsym RTLD_DEFAULT); else, for a Search library, one that a library of the
// process already loaded in a scope of its own (libnccl*, librccl*); else the first of its
// libraries that dlopen (RTLD_LOCAL) can load. Ranks that never create an ID never touch NCCL.
type Library struct {
	names  []string
	loaded []string // file name prefixes of already loaded libraries to use (Search only)
	mu     sync.Mutex
	fn     unsafe.Pointer
}

// Lib returns a Library for exactly library ("" means the default search, Search(false)); its
// NewID is a Generator.
func Lib(library string) *Library {
	if library == "" {
		return Search(false)
	}
	return &Library{names: []string{library}}
}

// Search returns the Library of the default search: an NCCL or RCCL the process has loaded,
// else libnccl.so.2 then librccl.so.1, or, with amdFirst (the process's GPU is AMD's), RCCL
// first in both.
func Search(amdFirst bool) *Library {
	if amdFirst {
		return &Library{names: []string{rcclLibrary, defaultLibrary}, loaded: []string{"librccl", "libnccl"}}
	}
	return &Library{names: []string{defaultLibrary, rcclLibrary}, loaded: []string{"libnccl", "librccl"}}
}

// NewID creates an ID with the library's ncclGetUniqueId, resolving it first if need be.
func (l *Library) NewID() (ID, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fn == nil {
		p, err := l.resolve()
		if err != nil {
			return ID{}, err
		}
		l.fn = p
	}
	return call(l.fn)
}

func (l *Library) resolve() (unsafe.Pointer, error) {
	if p := C.ni_in_process(); p != nil {
		return p, nil
	}
	var msg [512]C.char
	for _, prefix := range l.loaded {
		cp := C.CString(prefix)
		p := C.ni_loaded(cp, &msg[0], C.size_t(len(msg)))
		C.free(unsafe.Pointer(cp))
		if p != nil {
			return p, nil
		}
	}
	var tried []string
	for _, name := range l.names {
		cl := C.CString(name)
		p := C.ni_open(cl, &msg[0], C.size_t(len(msg)))
		C.free(unsafe.Pointer(cl))
		if p != nil {
			return p, nil
		}
		tried = append(tried, C.GoString(&msg[0]))
	}
	if len(l.loaded) == 0 {
		return nil, fmt.Errorf("ncclid: ncclGetUniqueId is not in the process and %s", strings.Join(tried, "; "))
	}
	return nil, fmt.Errorf("ncclid: ncclGetUniqueId is not in the process, no NCCL or RCCL is loaded, and every "+
		"library tried failed: %s (GPUHELPER_NCCL_LIBRARY names the file to use)", strings.Join(tried, "; "))
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
	lib, what := o.Library, "NCCL"
	if lib == "" {
		lib = "an unknown file"
	}
	if strings.HasPrefix(filepath.Base(o.Library), "librccl") {
		what = "RCCL" // its ncclGetVersion is the NCCL version it follows
	}
	if o.Version == 0 {
		return fmt.Sprintf("%s of unknown version in %s", what, lib)
	}
	return fmt.Sprintf("%s %s (%d) in %s", what, versionString(o.Version), o.Version, lib)
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
