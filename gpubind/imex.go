package gpubind

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// IMEXChannelDir holds the IMEX channel devices (channelN). A process that imports
// memory exported by another node's GPU (multi-node NVLink) must be able to open one,
// or CUDA fails with CUDA_ERROR_NOT_PERMITTED; Slurm's switch/nvidia_imex creates one
// per job.
const IMEXChannelDir = "/dev/nvidia-caps-imex-channels"

// IMEXDeviceName is the driver's character device name in /proc/devices.
const IMEXDeviceName = "nvidia-caps-imex-channels"

// IMEXDir is IMEXChannelDir below the discovery root.
func IMEXDir(root string) string { return rootPath(root, IMEXChannelDir) }

// IMEX is what a node offers for IMEX channels.
type IMEX struct {
	// Major is the major number of nvidia-caps-imex-channels in ROOT/proc/devices, -1
	// when the driver does not register it (no IMEX support).
	Major int
	// Dir is ROOT/dev/nvidia-caps-imex-channels; Channels its channelN entries, by N.
	Dir      string
	Channels []IMEXChannel
}

// IMEXChannel is one ROOT/dev/nvidia-caps-imex-channels/channelN.
type IMEXChannel struct {
	Path string
	N    int
	// Problem is "" for a character device of the IMEX major with minor N, else what
	// is wrong with it.
	Problem string
}

// DiscoverIMEX reads ROOT/proc/devices and ROOT/dev/nvidia-caps-imex-channels. A missing
// directory is no error (no channel), nor a missing /proc/devices (no major); an
// unreadable one is.
func DiscoverIMEX(root string) (*IMEX, error) {
	out := &IMEX{Major: -1, Dir: IMEXDir(root)}
	devs := rootPath(root, "proc", "devices")
	f, err := os.Open(devs)
	if os.IsNotExist(err) {
		return out, nil // a fixture tree without it: as a driver without IMEX
	}
	if err != nil {
		return nil, fmt.Errorf("IMEX: %w", err)
	}
	major, err := parseCharMajor(f, IMEXDeviceName)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("IMEX: %s: %w", devs, err)
	}
	out.Major = major
	ents, err := os.ReadDir(out.Dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("IMEX: %w", err)
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "channel")
		n, err := strconv.Atoi(rest)
		if !ok || err != nil || n < 0 || rest != strconv.Itoa(n) {
			continue
		}
		ch := IMEXChannel{Path: filepath.Join(out.Dir, e.Name()), N: n}
		var st unix.Stat_t
		switch {
		case unix.Stat(ch.Path, &st) != nil:
			ch.Problem = "cannot stat it"
		case st.Mode&unix.S_IFMT != unix.S_IFCHR:
			ch.Problem = "not a character device"
		case major >= 0 && int(unix.Major(st.Rdev)) != major:
			ch.Problem = fmt.Sprintf("major %d, not %s's %d", unix.Major(st.Rdev), IMEXDeviceName, major)
		case int(unix.Minor(st.Rdev)) != n:
			ch.Problem = fmt.Sprintf("minor %d, not %d", unix.Minor(st.Rdev), n)
		}
		out.Channels = append(out.Channels, ch)
	}
	sort.Slice(out.Channels, func(i, j int) bool { return out.Channels[i].N < out.Channels[j].N })
	return out, nil
}

// parseCharMajor finds name among the "Character devices:" of /proc/devices; -1 when
// it is not there.
func parseCharMajor(r io.Reader, name string) (int, error) {
	sc := bufio.NewScanner(r)
	inChar := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			inChar = true
		case strings.HasSuffix(line, "devices:"):
			inChar = false
		case inChar && line != "":
			num, dev, ok := strings.Cut(line, " ")
			if !ok || strings.TrimSpace(dev) != name {
				continue
			}
			m, err := strconv.Atoi(num)
			if err != nil || m < 0 {
				return -1, fmt.Errorf("line %q: bad major number", line)
			}
			return m, nil
		}
	}
	return -1, sc.Err()
}
