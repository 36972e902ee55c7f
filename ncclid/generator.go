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

// DefaultLibrary is what Lib dlopens when the process has no ncclGetUniqueId of its own.
const DefaultLibrary = "libnccl.so.2"

// Lib returns a Generator that uses the process's own ncclGetUniqueId (dlsym RTLD_DEFAULT),
// else the one in library (dlopen; "" means DefaultLibrary). The symbol is looked up on first
// use, so ranks that never create an ID never touch NCCL.
func Lib(library string) Generator {
	if library == "" {
		library = DefaultLibrary
	}
	var mu sync.Mutex
	var fn unsafe.Pointer
	return func() (ID, error) {
		mu.Lock()
		defer mu.Unlock()
		if fn == nil {
			cl := C.CString(library)
			defer C.free(unsafe.Pointer(cl))
			var from C.int
			var msg [512]C.char
			p := C.ni_resolve(cl, &from, &msg[0], C.size_t(len(msg)))
			if p == nil {
				return ID{}, fmt.Errorf("ncclid: %s", C.GoString(&msg[0]))
			}
			fn = p
		}
		return call(fn)
	}
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
