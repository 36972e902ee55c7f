package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*gb_check_args_fn)(int, char **, char *, size_t);
typedef int (*gb_check_cgroup_fn)(const char *, unsigned, char *, size_t);

static int gb_call_check_args(void *fn, int ac, char **av, char *err, size_t errlen)
{
	return ((gb_check_args_fn)fn)(ac, av, err, errlen);
}

static int gb_call_check_cgroup(void *fn, const char *mountinfo, unsigned flags, char *out,
				size_t outlen)
{
	return ((gb_check_cgroup_fn)fn)(mountinfo, flags, out, outlen);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// pluginFunc loads spank_gpubind.so lazily (its Slurm symbols stay unresolved; the checks it
// exports call none of them) and finds name. what says what the check is, for the errors.
// close unloads the plugin.
func pluginFunc(plugin, name, what string) (fn unsafe.Pointer, close func(), err error) {
	cpath := C.CString(plugin)
	defer C.free(unsafe.Pointer(cpath))
	h := C.dlopen(cpath, C.RTLD_LAZY|C.RTLD_LOCAL)
	if h == nil {
		return nil, nil, fmt.Errorf("cannot load %s to check %s: %s", plugin, what, C.GoString(C.dlerror()))
	}
	sym := C.CString(name)
	defer C.free(unsafe.Pointer(sym))
	fn = C.dlsym(h, sym)
	if fn == nil {
		C.dlclose(h)
		return nil, nil, fmt.Errorf("%s has no %s: older than this gpubind, %s not checked", plugin, name, what)
	}
	return fn, func() { C.dlclose(h) }, nil
}

// checkPluginArgs runs the plugin's own plugstack parser (gpubind_check_args, exported by
// spank_gpubind.so) on args.
func checkPluginArgs(plugin string, args []string) error {
	fn, closePlugin, err := pluginFunc(plugin, "gpubind_check_args", "the arguments")
	if err != nil {
		return err
	}
	defer closePlugin()
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

// The flags of gpubind_check_cgroup (GB_CG_ISOLATE, GB_CG_CPUS in spank/frontend/cgroup/cgroup.h)
// and its one success (GB_CG_OK).
const (
	cgroupIsolate = 1
	cgroupCpus    = 2
	cgroupOK      = 0
)

// probePluginCgroup asks the plugin's own cgroup probe (gpubind_check_cgroup, the code a step
// prepares with) which hierarchy it would use for flag with the mounts in mountinfo. ok: it
// would (text describes the hierarchy); !ok: it refuses or cannot tell (text says why).
func probePluginCgroup(plugin, mountinfo string, flag uint) (ok bool, text string, err error) {
	fn, closePlugin, err := pluginFunc(plugin, "gpubind_check_cgroup", "cgroups")
	if err != nil {
		return false, "", err
	}
	defer closePlugin()
	cmi := C.CString(mountinfo)
	defer C.free(unsafe.Pointer(cmi))
	var out [4096]C.char
	rc := C.gb_call_check_cgroup(fn, cmi, C.uint(flag), &out[0], C.size_t(len(out)))
	return rc == cgroupOK, C.GoString(&out[0]), nil
}
