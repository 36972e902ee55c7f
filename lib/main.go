// Command lib is libgpuhelper.so.1, built with -buildmode=c-shared. The public C API is the
// hand-written gpuhelper.h; shim.c implements it, refuses to enter Go in a forked child, and
// calls the gh* exports below. The exports are hidden by gpuhelper.map.
package main

/*
#include <stdlib.h>
#include <string.h>
#include "gpuhelper.h"

// In shim.c.
int gh_cuda_loaded(void);
void *gh_session(void);
int gh_nvml_clique(const char *bus, char *out, size_t len);
*/
import "C"

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gpubind/gpubind/lib/gpusel"
	"github.com/gpubind/gpubind/ncclid"
	"github.com/gpubind/gpubind/pmixkv"
)

func main() {}

// defaultTimeout is how long a rank waits for another rank's data unless GPUHELPER_TIMEOUT says
// otherwise: generous, because rank 0 may spend a long time starting CUDA before it publishes.
const defaultTimeout = 300 * time.Second

// codeError carries a GPUHELPER_E... code with its message.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	var ce *codeError
	if errors.As(err, &ce) {
		return err
	}
	return &codeError{code, err}
}

// errNCCL marks a failure of this process's own ncclGetUniqueId.
var errNCCL = errors.New("ncclGetUniqueId")

// isNCCL reports whether err is a failure to create an NCCL ID, here or on the root: the one
// kind of failure gpuhelper_init survives (the rank and GPU facts need no NCCL).
func isNCCL(err error) bool {
	return errors.Is(err, ncclid.ErrRoot) || errors.Is(err, errNCCL) || errors.Is(err, ncclid.ErrCommID)
}

// code maps an error onto a GPUHELPER_E... code.
func code(err error) int {
	var ce *codeError
	switch {
	case err == nil:
		return C.GPUHELPER_SUCCESS
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, pmixkv.ErrNeedServer):
		return C.GPUHELPER_ENOSERVER
	case errors.Is(err, ncclid.ErrOrder):
		return C.GPUHELPER_EORDER
	case errors.Is(err, pmixkv.ErrPeerDied):
		return C.GPUHELPER_EPEER
	case errors.Is(err, pmixkv.ErrTimeout):
		return C.GPUHELPER_ETIMEOUT
	case isNCCL(err), errors.Is(err, ncclid.ErrVersion):
		return C.GPUHELPER_ENCCL
	}
	return C.GPUHELPER_EPMIX
}

// The C environment, not Go's copy of it: Go snapshots environ when the library is loaded, and
// the application may have called setenv since (so does shim.c for CUDA_DEVICE_ORDER).
func lookupEnv(name string) (string, bool) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	p := C.getenv(cn)
	if p == nil {
		return "", false
	}
	return C.GoString(p), true
}

func getenv(name string) string { v, _ := lookupEnv(name); return v }

type config struct {
	timeout time.Duration
	mode    ncclid.Mode
	library string
	lazyID  bool // GPUHELPER_NCCL_ID=lazy: no world ID at init; gpuhelper_nccl_id makes it
	// amdFirst: this process's GPU is AMD's, so the default search tries RCCL before NCCL.
	amdFirst bool
}

func readConfig() (config, error) {
	c := config{timeout: defaultTimeout, library: getenv("GPUHELPER_NCCL_LIBRARY")}
	if v := strings.TrimSpace(getenv("GPUHELPER_TIMEOUT")); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 || s > 1e6 {
			return c, withCode(C.GPUHELPER_EENV, fmt.Errorf("GPUHELPER_TIMEOUT=%q, expected a number of seconds > 0", v))
		}
		c.timeout = time.Duration(s * float64(time.Second))
	}
	m, err := ncclid.ParseMode(getenv("GPUHELPER_EXCHANGE"))
	if err != nil {
		return c, withCode(C.GPUHELPER_EENV, fmt.Errorf("GPUHELPER_EXCHANGE: %w", err))
	}
	c.mode = m
	switch v := strings.TrimSpace(getenv("GPUHELPER_NCCL_ID")); strings.ToLower(v) {
	case "", "init":
	case "lazy":
		c.lazyID = true
	default:
		return c, withCode(C.GPUHELPER_EENV, fmt.Errorf("GPUHELPER_NCCL_ID=%q, expected \"init\" (the default) or \"lazy\"", v))
	}
	return c, nil
}

// errLazy is rank 0's answer at init under GPUHELPER_NCCL_ID=lazy. It travels like a failure to
// make the ID, so every rank agrees that there is none yet, whatever its own environment says.
var errLazy = fmt.Errorf("%w: not made at init: GPUHELPER_NCCL_ID=lazy on rank 0; "+
	"gpuhelper_nccl_id makes it when asked", errNCCL)

// state is the library's one session; mu serialises every call, so collectives keep their order
// within the process and init runs once.
var state struct {
	mu     sync.Mutex
	kv     pmixkv.KV
	cfg    config
	ex     *ncclid.Exchanger // kept across finalize/init: its key sequence must never restart
	info   pmixkv.Info
	gpu    gpusel.Choice
	id     ncclid.ID
	idErr  error          // why there is no world ID (id is zero), nil when there is one
	origin ncclid.Origin  // the NCCL that made id on rank 0
	userFn unsafe.Pointer // from gpuhelper_set_nccl_get_unique_id
	libs   map[string]*ncclid.Library
	// failed is an init that failed after reaching the PMIx server (see failedInit).
	failed *failedInit
	// openErr: the PMIx session could not be taken over (its facts were refused); it is
	// finalized, and init gives this answer from then on.
	openErr error
	// released says why PMIx was released in this process (gpuhelper_finalize, or an init
	// that failed after connecting): a PMIx client cannot initialise again (PMIx 4.2 then
	// answers NOT-FOUND for its own job data), so init refuses from then on.
	released string
}

// release closes kv and remembers why: no init after this.
func release(kv pmixkv.KV, why string) error {
	if state.released == "" {
		state.released = why
	}
	return kv.Close()
}

// The GPU scan, made once: by the prewarm thread while PMIx_Init runs (ghGoPrewarm), or by
// init itself if it gets there first (sync.Once makes the other wait for it).
var prescan struct {
	once sync.Once
	root string
	gpus []gpusel.GPU
	err  error
}

func scanOnce(root string) func(string) ([]gpusel.GPU, error) {
	return func(r string) ([]gpusel.GPU, error) {
		prescan.once.Do(func() { prescan.root = root; prescan.gpus, prescan.err = gpusel.Scan(root) })
		if prescan.root != r {
			return gpusel.Scan(r)
		}
		return prescan.gpus, prescan.err
	}
}

// ghGoPrewarm runs on shim.c's helper thread while the first gpuhelper_init is in PMIx_Init:
// the first call into Go (it waits for the runtime's start) and, when the GPU is to be found
// by a scan, the scan. It takes no lock and reads no environment.
//
//export ghGoPrewarm
func ghGoPrewarm(root *C.char, scan C.int) {
	defer func() { _ = recover() }()
	if scan != 0 {
		r := C.GoString(root)
		_, _ = scanOnce(r)(r)
	}
}

// library returns the Library for a configuration, one per GPUHELPER_NCCL_LIBRARY value: that
// file alone when set (it always wins over the search), else the default search, RCCL first
// when this process's GPU is AMD's (docs/helper.md "Where the ID comes from").
func library(cfg config) *ncclid.Library {
	if state.libs == nil {
		state.libs = map[string]*ncclid.Library{}
	}
	key := cfg.library
	if key == "" && cfg.amdFirst {
		key = "\x00amd" // no file name has a NUL
	}
	if state.libs[key] == nil {
		if cfg.library != "" {
			state.libs[key] = ncclid.Lib(cfg.library)
		} else {
			state.libs[key] = ncclid.Search(cfg.amdFirst)
		}
	}
	return state.libs[key]
}

// localOrigin describes the NCCL this process would make IDs with, loading nothing: the
// caller's function, else what the Library resolved, else the process's own symbol.
func localOrigin(cfg config) func() ncclid.Origin {
	return func() ncclid.Origin {
		fn := state.userFn
		if fn == nil {
			fn = library(cfg).Resolved()
		}
		if fn == nil {
			fn = ncclid.InProcess()
		}
		return ncclid.Describe(fn)
	}
}

// newID is the Exchanger's generator: the caller's function, else the process's own symbol or
// the configured library.
func newID(cfg config) ncclid.Generator {
	return func() (ncclid.ID, error) {
		var gen ncclid.Generator
		if state.userFn != nil {
			gen = ncclid.Func(state.userFn)
		} else {
			gen = library(cfg).NewID
		}
		id, err := gen()
		if err != nil {
			return id, fmt.Errorf("%w: %w", errNCCL, err)
		}
		return id, nil
	}
}

// failedInit is a gpuhelper_init that failed after it had reached the PMIx server. The session
// is kept, not released: gpuhelper_finalize still joins the other ranks' final barrier (they
// would wait for this rank until their timeout otherwise), and gpuhelper_abort still ends the
// job through PMIx. A later gpuhelper_init returns the same error, except after a timeout in
// the NCCL ID exchange, which it retries (the same collective, so it still meets the others).
type failedInit struct {
	kv    pmixkv.KV
	cfg   config
	info  pmixkv.Info
	gpu   gpusel.Choice
	err   error
	retry bool
}

// fail records a failed init and returns its error.
func fail(f *failedInit) error {
	state.failed = f
	return f.err
}

func initLocked() error {
	if state.kv != nil {
		return nil
	}
	if state.released != "" {
		return withCode(C.GPUHELPER_EFINALIZED, fmt.Errorf("gpuhelper_init: the library released PMIx in this "+
			"process (%s), and a PMIx client cannot initialise twice: call gpuhelper_init once, and "+
			"gpuhelper_finalize only when the process is done with the library", state.released))
	}
	if f := state.failed; f != nil {
		if !f.retry {
			return withCode(code(f.err), fmt.Errorf("gpuhelper_init failed before in this process and cannot "+
				"succeed now (call gpuhelper_finalize or gpuhelper_abort): %w", f.err))
		}
		state.failed = nil
		return worldID(f.kv, f.cfg, f.info, f.gpu)
	}
	if state.openErr != nil {
		return state.openErr
	}
	// PMIx first: a rank that fails below is then connected, and its gpuhelper_finalize can
	// meet the others'. shim.c opened the session already (gh_session); Go takes it over.
	kv, err := pmixkv.Open(pmixkv.Options{Getenv: getenv, Session: pmixkv.Session(C.gh_session())})
	if err != nil {
		// The session is spent (a failed one is finalized): the same answer from now on.
		state.openErr = err
		return err
	}
	info := kv.Info()
	cfg, err := readConfig()
	if err != nil {
		cfg.timeout = defaultTimeout
		return fail(&failedInit{kv: kv, cfg: cfg, info: info, err: err})
	}
	root := getenv("GPUHELPER_SYSROOT")
	gpu, err := gpusel.Choose(gpusel.Input{LookupEnv: lookupEnv, Root: root, LocalRank: info.LocalRank, Scan: scanOnce(root)})
	if err != nil {
		return fail(&failedInit{kv: kv, cfg: cfg, info: info, err: withCode(C.GPUHELPER_EGPU, err)})
	}
	cfg.amdFirst = gpu.Vendor == gpusel.VendorAMD
	if gpu.Clique, err = nvlClique(gpu.BusID); err != nil {
		return fail(&failedInit{kv: kv, cfg: cfg, info: info, err: withCode(C.GPUHELPER_EGPU, err)})
	}
	if err := isolateMIG(gpu, info.LocalRank); err != nil {
		return fail(&failedInit{kv: kv, cfg: cfg, info: info, err: err})
	}
	return worldID(kv, cfg, info, gpu)
}

// worldID is the collective part of init: the world NCCL ID.
func worldID(kv pmixkv.KV, cfg config, info pmixkv.Info, gpu gpusel.Choice) error {
	if state.ex == nil {
		state.ex = &ncclid.Exchanger{}
	}
	state.ex.KV, state.ex.Mode, state.ex.Timeout, state.ex.NewID = kv, cfg.mode, cfg.timeout, newID(cfg)
	state.ex.Getenv, state.ex.Local = getenv, localOrigin(cfg)
	state.ex.BarrierCollect = barrierCollect(info)
	// The world ID is made here, so that programs that read info.nccl_id after init (every 1.0
	// program) keep working. Failing to make it is not fatal: every rank learns of it from the
	// root in the same exchange, so all agree that there is no ID, and gpuhelper_nccl_id can try
	// again later. Other failures (timeout, PMIx) are.
	// A rank whose NCCL version differs from rank 0's fails here (ncclid.ErrVersion): it
	// could not use the ID.
	if cfg.lazyID {
		state.ex.NewID = func() (ncclid.ID, error) { return ncclid.ID{}, errLazy }
	}
	id, origin, idErr := state.ex.WorldOrigin()
	state.ex.NewID = newID(cfg)
	if idErr != nil && !isNCCL(idErr) {
		return fail(&failedInit{kv: kv, cfg: cfg, info: info, gpu: gpu, err: idErr, retry: errors.Is(idErr, pmixkv.ErrTimeout)})
	}
	state.kv, state.cfg, state.info, state.gpu, state.id, state.idErr = kv, cfg, info, gpu, id, idErr
	state.origin = origin
	return nil
}

// barrierCollect says whether a barrier (gpuhelper_barrier, gpuhelper_finalize) must fence with
// PMIX_COLLECT_DATA. On one node a plain fence waits for every rank. Across nodes, under
// Slurm's mpi/pmix (22.05 and 26.05 measured; SLURM_PMIX_FENCE_BARRIER makes no difference), a
// fence without it returns on each node as soon as that node's ranks are in: no barrier. Other
// servers were not measured across nodes here, so they collect too. Collecting copies every
// rank's committed data to every node: the cost of a barrier that holds.
func barrierCollect(info pmixkv.Info) bool { return info.NumNodes > 1 }

// nvlClique is this rank's multi-node NVLink clique: GPUBIND_NVL_CLIQUE (the plugin's), else
// NVML's answer when the program loaded and initialised NVML, else "".
func nvlClique(bus string) (string, error) {
	if v, ok := lookupEnv("GPUBIND_NVL_CLIQUE"); ok {
		v = strings.TrimSpace(v)
		uuid, id, dot := strings.Cut(v, ".")
		_, nerr := strconv.ParseUint(id, 10, 32)
		if v != "" && (!dot || uuid == "" || nerr != nil || len(v) >= C.GPUHELPER_NVL_CLIQUE_BYTES ||
			strings.Trim(strings.ToLower(uuid), "0123456789abcdef-") != "") {
			return "", fmt.Errorf("GPUBIND_NVL_CLIQUE=%q, expected <cluster_uuid>.<clique_id> as the gpubind plugin "+
				"sets it (like 6f1c0bd4-89f2-4f53-8b1a-5a47b0c3e0d1.5)", v)
		}
		return v, nil
	}
	var buf [C.GPUHELPER_NVL_CLIQUE_BYTES]C.char
	cb := C.CString(bus)
	defer C.free(unsafe.Pointer(cb))
	if C.gh_nvml_clique(cb, &buf[0], C.size_t(len(buf))) != 0 {
		return "", nil
	}
	return C.GoString(&buf[0]), nil
}

// isolateMIG gives a process whose choice is a MIG instance that instance alone: CUDA shows a
// process one MIG instance only, the first MIG entry of CUDA_VISIBLE_DEVICES, so with
// "MIG-a,MIG-b" every local rank would get MIG-a (and cuda_device 1 would not exist). Before
// CUDA starts, CUDA_VISIBLE_DEVICES is narrowed to the rank's instance (cuda_device 0); once
// CUDA runs that is too late, and a rank whose instance is not CUDA's first fails.
func isolateMIG(gpu gpusel.Choice, localRank int) error {
	if gpu.MIG == "" || gpu.MIGFirst {
		return nil
	}
	cvd := getenv("CUDA_VISIBLE_DEVICES")
	if strings.TrimSpace(cvd) == gpu.MIG {
		return nil
	}
	if C.gh_cuda_loaded() != 0 {
		return withCode(C.GPUHELPER_EMIG, fmt.Errorf("local rank %d would use MIG instance %s of CUDA_VISIBLE_DEVICES=%q, "+
			"but CUDA shows a process only one MIG instance (the first MIG entry) and it is already loaded, "+
			"so the library cannot narrow CUDA_VISIBLE_DEVICES to that instance: call gpuhelper_init before "+
			"CUDA starts, or launch each rank with its own instance (e.g. srun --gres=gpu:1 per task, or "+
			"CUDA_VISIBLE_DEVICES=MIG-... per rank)", localRank, gpu.MIG, cvd))
	}
	cn, cv := C.CString("CUDA_VISIBLE_DEVICES"), C.CString(gpu.MIG)
	defer C.free(unsafe.Pointer(cn))
	defer C.free(unsafe.Pointer(cv))
	if C.setenv(cn, cv, 1) != 0 {
		return withCode(C.GPUHELPER_EMIG, fmt.Errorf("local rank %d: setenv CUDA_VISIBLE_DEVICES=%s (its MIG instance) failed", localRank, gpu.MIG))
	}
	return nil
}

func setCString(dst []C.char, s string) {
	n := min(len(s), len(dst)-1)
	for i := 0; i < n; i++ {
		dst[i] = C.char(s[i])
	}
	dst[n] = 0
}

func fill(out *C.gpuhelper_info_t) {
	in := state.info
	out.rank, out.size = C.int(in.Rank), C.int(in.Size)
	out.local_rank, out.local_size = C.int(in.LocalRank), C.int(in.LocalSize)
	out.node_id, out.num_nodes = C.int(in.NodeID), C.int(in.NumNodes)
	out.cuda_device = C.int(state.gpu.CUDADevice)
	setCString(out.pci_bus_id[:], state.gpu.BusID)
	setCString(out.gpu_uuid[:], state.gpu.UUID)
	for i, b := range state.id {
		out.nccl_id[i] = C.uchar(b)
	}
	out.flags = 0
	if state.idErr == nil {
		out.flags |= C.GPUHELPER_INFO_NCCL_ID
	}
	setCString(out.nvl_clique[:], state.gpu.Clique)
}

// report writes err into the caller's buffer and returns its code.
func report(err error, buf *C.char, n C.size_t) C.int {
	if err == nil {
		return 0
	}
	if buf != nil && n > 0 {
		setCString(unsafe.Slice(buf, int(n)), "gpuhelper: "+err.Error())
	}
	return C.int(code(err))
}

// guard turns a panic into GPUHELPER_EINTERNAL: no panic may cross into C.
func guard(rc *C.int, buf *C.char, n C.size_t) {
	if r := recover(); r != nil {
		*rc = report(withCode(C.GPUHELPER_EINTERNAL, fmt.Errorf("internal error: %v", r)), buf, n)
	}
}

// ghGoInit: needID is set for callers built against the 1.0 header, which has no flags field
// to say that nccl_id is missing; for them no world ID stays an error (GPUHELPER_ENCCL), as in
// 1.0.
//
//export ghGoInit
func ghGoInit(info *C.gpuhelper_info_t, needID C.int, buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	fresh := state.kv == nil
	if err := initLocked(); err != nil {
		return report(err, buf, n)
	}
	if needID != 0 && state.idErr != nil {
		err := fmt.Errorf("%w (this program was built against the 1.0 header, where "+
			"gpuhelper_init needs the NCCL ID; rebuild against 1.1 to run without NCCL)", state.idErr)
		if fresh {
			// As 1.0 did: a failed init leaves the library uninitialised; the session is
			// kept for gpuhelper_finalize only.
			fail(&failedInit{kv: state.kv, cfg: state.cfg, info: state.info, gpu: state.gpu, err: err})
			state.kv = nil
		}
		return report(err, buf, n)
	}
	fill(info)
	return 0
}

//export ghGoNcclID
func ghGoNcclID(out *C.uchar, buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	if err := needInit(); err != nil {
		return report(err, buf, n)
	}
	if state.idErr != nil {
		// Every rank saw the same failure at init, so every rank is here: a new collective.
		id, origin, err := state.ex.WorldOrigin()
		if err != nil {
			if isNCCL(err) {
				state.idErr = err
			}
			return report(fmt.Errorf("gpuhelper_nccl_id: no world NCCL ID: %w", err), buf, n)
		}
		state.id, state.origin, state.idErr = id, origin, nil
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(out)), ncclid.Bytes), state.id[:])
	return 0
}

//export ghGoNcclOrigin
func ghGoNcclOrigin(version *C.int, lib *C.char, libBytes C.size_t, buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	if err := needInit(); err != nil {
		return report(err, buf, n)
	}
	if state.idErr != nil {
		return report(fmt.Errorf("gpuhelper_nccl_origin: there is no world NCCL ID: %w", state.idErr), buf, n)
	}
	o := state.origin
	if lib != nil {
		if uint64(libBytes) < uint64(len(o.Library))+1 {
			return report(withCode(C.GPUHELPER_EINVAL, fmt.Errorf("gpuhelper_nccl_origin: library_bytes %d, "+
				"expected at least %d for %q and its NUL", libBytes, len(o.Library)+1, o.Library)), buf, n)
		}
		setCString(unsafe.Slice(lib, int(libBytes)), o.Library)
	}
	if version != nil {
		*version = C.int(o.Version)
	}
	return 0
}

//export ghGoFinalize
func ghGoFinalize(buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	kv, cfg, info := state.kv, state.cfg, state.info
	if kv == nil && state.failed != nil {
		// A rank whose init failed joins the final barrier too, so that the others do not
		// wait for it until their timeout.
		kv, cfg, info = state.failed.kv, state.failed.cfg, state.failed.info
	}
	if kv == nil {
		return 0
	}
	// A barrier first: a root must not leave while others may still fetch its IDs from its
	// node's PMIx server (under Slurm that server goes away with the node's last task).
	// Collecting across nodes (barrierCollect): under Slurm a fence without PMIX_COLLECT_DATA
	// does not wait for the other nodes (a 2-node root left before the others had its ID, 2
	// runs in 4).
	err := kv.Fence(barrierCollect(info), cfg.timeout)
	if err != nil {
		err = fmt.Errorf("gpuhelper_finalize: waiting for the other ranks: %w", err)
	}
	if cerr := release(kv, "gpuhelper_finalize was called"); err == nil {
		err = cerr
	}
	state.kv, state.failed = nil, nil
	return report(err, buf, n)
}

// ghGoReleaseFailed runs at process exit (atexit, registered after a failed init): the session
// of a failed init that gpuhelper_finalize did not end is released without a barrier. It does
// not wait for state.mu: a thread may still sit in a call when the process exits.
//
//export ghGoReleaseFailed
func ghGoReleaseFailed() {
	defer func() { _ = recover() }()
	if !state.mu.TryLock() {
		return
	}
	defer state.mu.Unlock()
	if f := state.failed; f != nil && state.kv == nil {
		release(f.kv, "the process exited after a failed gpuhelper_init")
		state.failed = nil
	}
}

//export ghGoSetNcclFn
func ghGoSetNcclFn(fn unsafe.Pointer, buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	state.userFn = fn
	return 0
}

func needInit() error {
	if state.kv == nil && state.failed != nil {
		return withCode(C.GPUHELPER_ENOTINIT, fmt.Errorf("gpuhelper_init failed (%v): only gpuhelper_finalize "+
			"and gpuhelper_abort work after that", state.failed.err))
	}
	if state.kv == nil {
		return withCode(C.GPUHELPER_ENOTINIT, errors.New("call gpuhelper_init first (and not after gpuhelper_finalize)"))
	}
	return nil
}

func scalableCount() (int, error) {
	if err := needInit(); err != nil {
		return 0, err
	}
	size := state.info.Size
	v := strings.TrimSpace(getenv("GPUHELPER_SCALABLE_IDS"))
	if v == "" {
		return ncclid.DefaultRoots(size), nil
	}
	k, err := strconv.Atoi(v)
	if err != nil || k < 1 {
		return 0, withCode(C.GPUHELPER_EENV, fmt.Errorf("GPUHELPER_SCALABLE_IDS=%q, expected an integer >= 1", v))
	}
	return min(k, size), nil
}

//export ghGoScalableCount
func ghGoScalableCount(buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	k, err := scalableCount()
	if err != nil {
		return report(err, buf, n)
	}
	return C.int(k)
}

//export ghGoScalableIDs
func ghGoScalableIDs(nids C.int, ids *C.uchar, nbytes C.size_t, buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	if err := needInit(); err != nil {
		return report(err, buf, n)
	}
	size := state.info.Size
	switch {
	case ids == nil:
		return report(withCode(C.GPUHELPER_EINVAL, errors.New("gpuhelper_scalable_ids: ids is NULL")), buf, n)
	case nids < 1 || int(nids) > size:
		return report(withCode(C.GPUHELPER_EINVAL, fmt.Errorf("gpuhelper_scalable_ids: nids %d, expected 1..%d (the job size)", nids, size)), buf, n)
	case uint64(nbytes) < uint64(nids)*ncclid.Bytes:
		return report(withCode(C.GPUHELPER_EINVAL, fmt.Errorf("gpuhelper_scalable_ids: ids_bytes %d, expected at least nids*%d = %d",
			nbytes, ncclid.Bytes, int(nids)*ncclid.Bytes)), buf, n)
	}
	got, err := state.ex.Scalable(int(nids))
	if err != nil {
		return report(err, buf, n)
	}
	out := unsafe.Slice((*byte)(unsafe.Pointer(ids)), int(nids)*ncclid.Bytes)
	for i, id := range got {
		copy(out[i*ncclid.Bytes:], id[:])
	}
	return 0
}

//export ghGoGroupID
func ghGoGroupID(color C.int, g *C.gpuhelper_group_t, buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	if err := needInit(); err != nil {
		return report(err, buf, n)
	}
	c := int(color)
	if c < 0 && c != C.GPUHELPER_COLOR_NODE {
		return report(withCode(C.GPUHELPER_EINVAL, fmt.Errorf("gpuhelper_group_id: color %d, expected >= 0 or GPUHELPER_COLOR_NODE (%d)", c, C.GPUHELPER_COLOR_NODE)), buf, n)
	}
	if c == C.GPUHELPER_COLOR_NODE {
		c = ncclid.NodeColor
	}
	grp, err := state.ex.Group(c)
	if err != nil {
		return report(err, buf, n)
	}
	g.color, g.rank, g.size, g.root = color, C.int(grp.Rank), C.int(grp.Size), C.int(grp.Root)
	for i, b := range grp.ID {
		g.nccl_id[i] = C.uchar(b)
	}
	return 0
}

//export ghGoNvlCliques
func ghGoNvlCliques(count *C.int, buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	if err := needInit(); err != nil {
		return report(err, buf, n)
	}
	var mine [C.GPUHELPER_NVL_CLIQUE_BYTES]byte
	copy(mine[:len(mine)-1], state.gpu.Clique)
	all, err := state.ex.Allgather(mine[:])
	if err != nil {
		return report(collErr(fmt.Errorf("gpuhelper_nvl_cliques: %w", err)), buf, n)
	}
	seen := map[string]bool{}
	for _, b := range all {
		if c, _, _ := strings.Cut(string(b), "\x00"); c != "" {
			seen[c] = true
		}
	}
	*count = C.int(len(seen))
	return 0
}

// collErr gives a collective's errors their codes: bad sizes are the caller's input.
func collErr(err error) error {
	if errors.Is(err, ncclid.ErrSize) {
		return withCode(C.GPUHELPER_EINVAL, err)
	}
	return err
}

//export ghGoBarrier
func ghGoBarrier(buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	if err := needInit(); err != nil {
		return report(err, buf, n)
	}
	return report(state.ex.Barrier(), buf, n)
}

//export ghGoBcast
func ghGoBcast(root C.int, data unsafe.Pointer, size C.size_t, buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	if err := needInit(); err != nil {
		return report(err, buf, n)
	}
	in := state.info
	switch {
	case root < 0 || int(root) >= in.Size:
		return report(withCode(C.GPUHELPER_EINVAL, fmt.Errorf("gpuhelper_bcast: root %d, expected 0..%d (the job size - 1)", root, in.Size-1)), buf, n)
	case uint64(size) > ncclid.MaxCollBytes:
		return report(withCode(C.GPUHELPER_EINVAL, fmt.Errorf("gpuhelper_bcast: len %d, expected at most GPUHELPER_COLL_MAX_BYTES (%d)", size, ncclid.MaxCollBytes)), buf, n)
	case data == nil && size > 0:
		return report(withCode(C.GPUHELPER_EINVAL, fmt.Errorf("gpuhelper_bcast: buf is NULL with len %d", size)), buf, n)
	}
	var mine []byte
	if int(root) == in.Rank {
		mine = C.GoBytes(data, C.int(size))
	}
	got, err := state.ex.Bcast(int(root), mine, int(size))
	if err != nil {
		return report(collErr(fmt.Errorf("gpuhelper_bcast: %w", err)), buf, n)
	}
	if int(root) != in.Rank && size > 0 {
		copy(unsafe.Slice((*byte)(data), int(size)), got)
	}
	return 0
}

//export ghGoAllgather
func ghGoAllgather(data unsafe.Pointer, size C.size_t, out unsafe.Pointer, outBytes C.size_t, buf *C.char, n C.size_t) (rc C.int) {
	defer guard(&rc, buf, n)
	state.mu.Lock()
	defer state.mu.Unlock()
	if err := needInit(); err != nil {
		return report(err, buf, n)
	}
	ranks := uint64(state.info.Size)
	switch {
	case uint64(size) > ncclid.MaxCollBytes:
		return report(withCode(C.GPUHELPER_EINVAL, fmt.Errorf("gpuhelper_allgather: len %d, expected at most GPUHELPER_COLL_MAX_BYTES (%d)", size, ncclid.MaxCollBytes)), buf, n)
	case data == nil && size > 0:
		return report(withCode(C.GPUHELPER_EINVAL, fmt.Errorf("gpuhelper_allgather: buf is NULL with len %d", size)), buf, n)
	case out == nil && size > 0:
		return report(withCode(C.GPUHELPER_EINVAL, errors.New("gpuhelper_allgather: out is NULL")), buf, n)
	case uint64(outBytes) < ranks*uint64(size):
		return report(withCode(C.GPUHELPER_EINVAL, fmt.Errorf("gpuhelper_allgather: out_bytes %d, expected at least size*len = %d*%d = %d",
			outBytes, ranks, size, ranks*uint64(size))), buf, n)
	}
	all, err := state.ex.Allgather(C.GoBytes(data, C.int(size)))
	if err != nil {
		return report(collErr(fmt.Errorf("gpuhelper_allgather: %w", err)), buf, n)
	}
	if size > 0 {
		dst := unsafe.Slice((*byte)(out), int(ranks)*int(size))
		for r, b := range all {
			copy(dst[r*int(size):], b)
		}
	}
	return 0
}
