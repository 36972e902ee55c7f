package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*gb_check_args_fn)(int, char **, char *, size_t);

static int gb_call_check_args(void *fn, int ac, char **av, char *err, size_t errlen)
{
	return ((gb_check_args_fn)fn)(ac, av, err, errlen);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// checkPluginArgs runs the plugin's own plugstack parser (gpubind_check_args, exported by
// spank_gpubind.so) on args. The plugin is loaded lazily: its Slurm symbols stay
// unresolved, and the parser calls none of them.
func checkPluginArgs(plugin string, args []string) error {
	cpath := C.CString(plugin)
	defer C.free(unsafe.Pointer(cpath))
	h := C.dlopen(cpath, C.RTLD_LAZY|C.RTLD_LOCAL)
	if h == nil {
		return fmt.Errorf("cannot load %s to check the arguments: %s", plugin, C.GoString(C.dlerror()))
	}
	defer C.dlclose(h)
	sym := C.CString("gpubind_check_args")
	defer C.free(unsafe.Pointer(sym))
	fn := C.dlsym(h, sym)
	if fn == nil {
		return fmt.Errorf("%s has no gpubind_check_args: older than this gpubind, arguments not checked", plugin)
	}
	av := make([]*C.char, len(args)+1)
	for i, a := range args {
		av[i] = C.CString(a)
		defer C.free(unsafe.Pointer(av[i]))
	}
	// The array itself goes to C memory, so C may keep pointers into it for the call.
	cav := (**C.char)(C.malloc(C.size_t(len(av)) * C.size_t(unsafe.Sizeof(av[0]))))
	defer C.free(unsafe.Pointer(cav))
	copy(unsafe.Slice(cav, len(av)), av)
	var errbuf [512]C.char
	if C.gb_call_check_args(fn, C.int(len(args)), cav, &errbuf[0], C.size_t(len(errbuf))) != 0 {
		return fmt.Errorf("%s", C.GoString(&errbuf[0]))
	}
	return nil
}
