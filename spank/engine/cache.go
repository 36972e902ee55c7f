package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gpubind/gpubind/gpubind"
)

// cacheFile is the JSON stored in the cache.
type cacheFile struct {
	Key      string            `json:"key"`
	Topology *gpubind.Topology `json:"topology"`
}

// cacheKey names what the cached discovery depends on: the boot, the driver version, the
// MIG layout, and the admin's source/root/snapshot settings. The fabric state is not in
// the key (reading it needs NVML): readCache expires entries that hold one instead.
func cacheKey(req *request) (string, error) {
	boot, err := os.ReadFile(bootIDPath)
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	driver := gpubind.DriverVersion(req.Root)
	if driver == "" {
		driver = "nodriver"
	}
	root := req.Root
	if root == "" {
		root = "/"
	}
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	snap := "-"
	if req.Snapshot != "" {
		if size, mtime, err := statSnapshot(req); err == nil {
			snap = fmt.Sprintf("%s:%d:%d", req.Snapshot, size, mtime)
		} else {
			snap = req.Snapshot + ":missing"
		}
	}
	src := req.Source
	if src == "" {
		src = gpubind.SourceAuto
	}
	key := fmt.Sprintf("gpubind-cache 1\nboot=%s\ndriver=%s\nmig=%s\nsource=%s\nroot=%s\nsnapshot=%s\n",
		strings.TrimSpace(string(boot)), driver, migLayout(req.Root), src, root, snap)
	// AMD: the KFD topology's generation (it changes when KFD nodes come and go, as on an
	// MI300 partition mode switch) and the amdgpu version. Only where KFD exists, so
	// that an NVIDIA node's key stays as it was. amdtopo=2: AMD GPUs carry their card
	// node minor (isolate needs it), amdtopo=3 the node's cores and each GPU's L3 share
	// (the cpus flag), so a topology cached without them is not reused.
	if gen := gpubind.KFDGeneration(req.Root); gen != "" {
		key += fmt.Sprintf("kfd=%s amdgpu=%s amdtopo=3\n", gen, gpubind.AMDDriverVersion(req.Root))
	}
	return key, nil
}

// migCaps and migGlobs name the files of the MIG GPU and compute instances the driver
// exposes (ROOT/proc/driver/nvidia/capabilities/gpuN/mig/giG/ciC). The front end's plan
// cache key globs the same (spank/frontend/plancache.c); TestMIGGlobsAgree checks it.
const migCaps = "/proc/driver/nvidia/capabilities"

var migGlobs = []string{"gpu*/mig/gi*", "gpu*/mig/gi*/ci*"}

// migLayout lists the MIG GPU and compute instances the driver exposes (migGlobs, no
// NVML needed): repartitioning without a reboot changes it, and with it the cached
// discovery.
func migLayout(root string) string {
	base := filepath.Join(root, migCaps)
	var all []string
	for _, pat := range migGlobs {
		m, _ := filepath.Glob(filepath.Join(base, pat))
		for _, p := range m {
			if rel, err := filepath.Rel(base, p); err == nil {
				all = append(all, rel)
			}
		}
	}
	if len(all) == 0 {
		return "-"
	}
	sort.Strings(all)
	return strings.Join(all, ",")
}

func cachePath(dir, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(dir, "topo-"+hex.EncodeToString(sum[:16])+".json")
}

// secureOwner checks that fi is owned by the effective user (root in slurmstepd) and
// not writable by group or others.
func secureOwner(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", path)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not %d", path, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by group or others (mode %v)", path, fi.Mode().Perm())
	}
	return nil
}

// checkCacheDir verifies (creating it if missing, 0755) that dir is a directory owned
// by us and not writable by others.
func checkCacheDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cache dir: %w", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("cache dir: %w", err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("cache dir %s is not a directory", dir)
	}
	return secureOwner(dir, fi)
}

// readCache returns the cached topology for key, or an error saying why there is none
// (missing, insecure, stale or corrupt).
func readCache(path, key string) (*gpubind.Topology, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if err := secureOwner(path, fi); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cf struct {
		Key      string          `json:"key"`
		Topology json.RawMessage `json:"topology"`
	}
	if err := json.Unmarshal(data, &cf); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cf.Key != key {
		return nil, fmt.Errorf("%s is stale (key differs)", path)
	}
	t, err := gpubind.ParseSnapshot(cf.Topology)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// The NVLink fabric changes without a reboot: such an entry lives FabricTTL
	// (FabricPendingTTL while a fabric is not ready), then discovery runs again.
	if ttl := t.FabricTTL(); ttl > 0 && time.Since(fi.ModTime()) > ttl {
		return nil, errCacheExpired
	}
	return t, nil
}

// errCacheExpired: the entry holds fabric state older than its lifetime; discovery
// runs again, quietly (an expected event, not a problem worth a message).
var errCacheExpired = errors.New("cached fabric state expired")

// writeCache stores the topology atomically: a temporary file in the same directory,
// mode 0644, renamed over the old one.
func writeCache(dir, path, key string, t *gpubind.Topology) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(cacheFile{Key: key, Topology: t}); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".topo-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// loadTopology returns the node's topology. A snapshot source is read directly (it is
// already a file); other sources go through the per-boot cache, so that the step path
// costs a few small reads and discovery (NVML: hundreds of ms) runs once per boot and
// driver version. Cache problems never fail the step: they fall back to discovery and
// say so in the notes.
func loadTopology(req *request) (*gpubind.Topology, []string, error) {
	opts := gpubind.DiscoverOptions{Source: req.Source, Root: req.Root, Snapshot: req.Snapshot, NVML: nvmlLib}
	if req.SnapshotFD >= 0 {
		data, err := readSnapshotFD(req)
		if err != nil {
			return nil, nil, err
		}
		opts.SnapshotData = data
	}
	if req.Source == gpubind.SourceSnapshot || (req.Source == "" && req.Snapshot != "") {
		opts.Source = gpubind.SourceSnapshot
		t, notes, err := gpubind.Discover(opts)
		return t, notes, err
	}
	dir := req.CacheDir
	if dir == "" {
		dir = gpubind.DefaultCacheDir
	}
	key, kerr := cacheKey(req)
	var notes []string
	var path string
	if kerr == nil {
		if err := checkCacheDir(dir); err != nil {
			notes = append(notes, "discovery cache not used: "+err.Error())
			kerr = err
		} else {
			path = cachePath(dir, key)
			if t, err := readCache(path, key); err == nil {
				gpubind.RefreshNICPorts(t, req.Root)
				return t, nil, nil
			} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errCacheExpired) {
				notes = append(notes, "discovery cache ignored: "+err.Error())
			}
		}
	} else {
		notes = append(notes, "discovery cache not used: "+kerr.Error())
	}
	t, dnotes, err := gpubind.Discover(opts)
	if err != nil {
		return nil, nil, err
	}
	_ = dnotes // which backends ran is recorded in t.Backends and the Source maps
	if kerr == nil {
		if err := writeCache(dir, path, key, t); err != nil {
			notes = append(notes, "discovery cache not written: "+err.Error())
		}
	}
	return t, notes, nil
}

// statSnapshot is the snapshot file's size and mtime (ns): from its fd when the plugin gave
// one (never an os.File there: its finalizer would close the fd).
func statSnapshot(req *request) (int64, int64, error) {
	if req.SnapshotFD >= 0 {
		var st syscall.Stat_t
		if err := syscall.Fstat(req.SnapshotFD, &st); err != nil {
			return 0, 0, err
		}
		return st.Size, st.Mtim.Nano(), nil
	}
	st, err := os.Stat(req.Snapshot)
	if err != nil {
		return 0, 0, err
	}
	return st.Size(), st.ModTime().UnixNano(), nil
}

// readSnapshotFD reads the snapshot from the fd the plugin checked (spank/frontend/trust.c),
// never from its path: whatever happened to the path since, this is the file that was
// checked. At most gpubind.MaxSnapshotBytes.
func readSnapshotFD(req *request) ([]byte, error) {
	var buf []byte
	chunk := make([]byte, 64<<10)
	for {
		n, err := syscall.Pread(req.SnapshotFD, chunk, int64(len(buf)))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("snapshot %s (fd %d): %v", req.Snapshot, req.SnapshotFD, err)
		}
		if n == 0 {
			if buf == nil {
				buf = []byte{}
			}
			return buf, nil
		}
		buf = append(buf, chunk[:n]...)
		if len(buf) > gpubind.MaxSnapshotBytes {
			return nil, fmt.Errorf("snapshot %s is more than %d bytes", req.Snapshot, gpubind.MaxSnapshotBytes)
		}
	}
}
