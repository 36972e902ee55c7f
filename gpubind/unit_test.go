package gpubind_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
)

func TestCPUSet(t *testing.T) {
	s, err := gpubind.ParseCPUList("0-3,8,10-11")
	if err != nil || s.String() != "0-3,8,10-11" || s.Count() != 7 || s.Hex() != "0xd0f" {
		t.Fatalf("ParseCPUList: %v %q %d %s", err, s, s.Count(), s.Hex())
	}
	for _, bad := range []string{"3-1", "a", "1,,2", "-1", "99999999"} {
		if _, err := gpubind.ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) accepted", bad)
		}
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0", "0000:3b:00.0": "0000:3b:00.0", "3b:00.0": "0000:3b:00.0",
		"0009:01:00.0": "0009:01:00.0", " 0000:00:06.0\n": "0000:00:06.0",
	} {
		if got, err := gpubind.NormalizeBusID(in); err != nil || got != want {
			t.Errorf("NormalizeBusID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "3b", "0000:3b:00", "0000:3g:00.0", "0000:3b:20.0", "0000:3b:00.8", "100000:00:00.0"} {
		if _, err := gpubind.NormalizeBusID(bad); err == nil {
			t.Errorf("NormalizeBusID(%q) accepted", bad)
		}
	}
}

func TestParseOption(t *testing.T) {
	for in, want := range map[string]string{
		"":                                  "closest",
		"closest":                           "closest",
		"verbose":                           "closest,verbose",
		"pack,nic,cpus":                     "pack,nic,cpus",
		"spread,isolate":                    "spread,isolate",
		"map:0,1,2*2,verbose":               "map:0,1,2,2,verbose",
		"map:GPU-abc,MIG-x*2":               "map:GPU-abc,MIG-x,MIG-x",
		"per-task:2,nic":                    "per-task:2,nic",
		"single:4":                          "single:4",
		"off":                               "off",
		"verbose,nic,isolate":               "closest,verbose,nic,isolate",
		"map:3,verbose,nic":                 "map:3,verbose,nic",
		"closest,cpus,verbose":              "closest,verbose,cpus",
		"map:0*4":                           "map:0,0,0,0",
		"per-task:64":                       "per-task:64",
		"single:1,verbose,cpus":             "single:1,verbose,cpus",
		"closest,uuid":                      "closest,uuid",
		"uuid,verbose":                      "closest,verbose,uuid",
		"pack,uuid,visible=localid,isolate": "pack,isolate,uuid,visible=localid",
	} {
		o, err := gpubind.ParseOption(in)
		if err != nil || o.String() != want {
			t.Errorf("ParseOption(%q) = %q, %v; want %q", in, o.String(), err, want)
		}
	}
	for in, want := range map[string]string{
		"closest,bogus":    `"bogus"`,
		"nearest":          `"nearest"`,
		"pack,spread":      `second policy "spread"`,
		"verbose,pack":     `second policy "pack"`,
		"map:":             "map needs a list",
		"map:0,x":          `"x"`,
		"map:0*0":          "repeat count",
		"per-task:0":       "per-task needs a count",
		"per-task":         "per-task needs a count",
		"single:x":         "single needs a count",
		"closest:3":        "takes no argument",
		"closest,,nic":     "empty item",
		"per-task:65":      "1..64",
		"map:-1":           `"-1"`,
		"map:0*5000":       "repeat count",
		"closest,verbose,": "empty item",
	} {
		if _, err := gpubind.ParseOption(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseOption(%q) error %v, want one naming %s", in, err, want)
		}
	}
	if o, _ := gpubind.ParseOption("help"); o.Policy != gpubind.PolicyHelp {
		t.Errorf("help: %+v", o)
	}
	f, err := gpubind.ParseFlags("force", "nic,isolate")
	if err != nil {
		t.Fatal(err)
	}
	never, _ := gpubind.ParseFlags("never", "isolate")
	if got := (gpubind.Flags{Verbose: true}).Apply(f, never).String(); got != "verbose,nic" {
		t.Errorf("Apply: %s", got)
	}
}

func TestGresConfAndHostlist(t *testing.T) {
	h, err := gpubind.ExpandHostlist("node[1-3,07],gpu")
	if err != nil || !reflect.DeepEqual(h, []string{"node1", "node2", "node3", "node07", "gpu"}) {
		t.Fatalf("ExpandHostlist: %v %v", h, err)
	}
	for _, bad := range []string{"n[1-", "n[3-1]", "n[[1]]", "a,,b", "n[1-99999]"} {
		if _, err := gpubind.ExpandHostlist(bad); err == nil {
			t.Errorf("ExpandHostlist(%q) accepted", bad)
		}
	}
	gc, err := gpubind.ParseGresConf(`# comment
AutoDetect=off
NodeName=node[1-2] Name=gpu Type=h100 File=/dev/nvidia[2-3] Cores=0-3
NodeName=node9 Name=gpu File=/dev/nvidia7
Name=gpu File=/dev/nvidia0
name=mps Count=100
NodeName=node1 Name=gpu MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap21
`, "node1")
	if err != nil || !reflect.DeepEqual(gc.Files, []string{"/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia0", "/dev/nvidia1"}) || gc.AutoDetect != "off" {
		t.Fatalf("ParseGresConf: %+v %v", gc, err)
	}
	other, err := gpubind.ParseGresConf("NodeName=node9 Name=gpu File=/dev/nvidia0\n", "node1")
	if err != nil || other.OtherNodes != 1 || len(other.Files) != 0 {
		t.Fatalf("other node: %+v %v", other, err)
	}
	if gm, _ := gpubind.BuildGresMap(&gpubind.Topology{}, other, "x"); !gm.Assumed {
		t.Error("gres.conf for other nodes only: mapping not marked as assumed")
	}
	if all, _ := gpubind.ParseGresConf("NodeName=node9 Name=gpu File=/dev/nvidia0\n", ""); len(all.Files) != 1 {
		t.Errorf("node \"\" does not match every line: %+v", all)
	}
	if _, err := gpubind.ParseGresConf("Name=gpu File", "n"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad gres.conf line accepted: %v", err)
	}
}

func TestDeviceMinorNeedsCharDevice(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nvidia0")
	os.WriteFile(p, nil, 0o644)
	if _, err := gpubind.DeviceMinor(p); err == nil || !strings.Contains(err.Error(), "not a character device") {
		t.Errorf("regular file accepted as GPU device: %v", err)
	}
	if _, err := gpubind.DeviceMinor("/dev/null"); err == nil || !strings.Contains(err.Error(), "major 1") {
		t.Errorf("/dev/null accepted: %v", err)
	}
	if _, err := gpubind.DeviceMinor("/nonexistent/nvidia0"); err == nil {
		t.Error("missing device accepted")
	}
}

func TestParseNvidiaInformation(t *testing.T) {
	bus, _, err := gpubind.ParseNvidiaInformation("Model: \t H100\nGPU UUID: \t GPU-1234\nBus Location: \t 0000:1B:00.0\nDevice Minor: \t 3\n")
	if err != nil || bus != "0000:1b:00.0" {
		t.Fatalf("%q %v", bus, err)
	}
	for _, bad := range []string{"Device Minor: 3\n", "Bus Location: zz\n", "Bus Location: 0000:1b:00.0\nDevice Minor: 999\n", "Bus Location: 0000:1b:00.0\nGPU UUID: nope\n"} {
		if _, _, err := gpubind.ParseNvidiaInformation(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	if v := gpubind.ParseDriverVersion("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Thu Feb 22\n"); v != "550.54.15" {
		t.Errorf("driver version %q", v)
	}
	if v := gpubind.ParseDriverVersion("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n"); v != "570.86.15" {
		t.Errorf("open driver version %q", v)
	}
}

func TestTableRoundTripAndTruncation(t *testing.T) {
	tab := &gpubind.Table{
		Status: gpubind.StatusWarn, Messages: []string{"two\nlines\x01"},
		Flags: gpubind.Flags{NIC: true}, Rule: gpubind.RuleNUMA, Share: 2, PerTask: 1, NTasks: 2,
		NUMA:     []gpubind.TableNUMA{{ID: 0, CPUs: gpubind.NewCPUSet(0, 1)}, {ID: 1}},
		GPUs:     []gpubind.TableGPU{{ID: 0, Visible: "0", NVMLIndex: 3, Minor: -1, BusID: "0000:3b:00.0", NUMA: -1, Dev: "/dev/nvidia0"}},
		NUMAGPUs: map[int][]int{0: {0}, 1: nil},
		Fallback: []int{0},
		Tasks:    []gpubind.TableTask{{Local: 0, GPUs: []int{0}, CPUs: gpubind.NewCPUSet(1)}, {Local: 1}},
	}
	text := tab.String()
	if !strings.Contains(text, "message two?lines?\n") || !strings.Contains(text, "gpu 0 0 3 -1 0000:3b:00.0 - -1 - /dev/nvidia0\n") ||
		!strings.Contains(text, "numa 1 -\n") || !strings.Contains(text, "numagpus 1 -\n") || !strings.Contains(text, "task 1 - -\n") ||
		!strings.HasSuffix(text, "end 16\n") {
		t.Fatalf("encoding:\n%s", text)
	}
	// The plugin's parser (package rule runs the C code) takes it, and refuses it cut short
	// or changed.
	if rt, err := rule.Parse(text); err != nil {
		t.Fatalf("the plugin cannot read the table: %v\n%s", err, text)
	} else {
		rt.Close()
	}
	lines := strings.SplitAfter(text, "\n")
	for cut := 1; cut < len(lines)-1; cut++ {
		if _, err := rule.Parse(strings.Join(lines[:cut], "")); err == nil {
			t.Errorf("table cut after %d lines parsed", cut)
		}
	}
	for _, bad := range []string{
		strings.Replace(text, "end 16", "end 15", 1),
		strings.Replace(text, "gpubind-plan 1", "gpubind-plan 2", 1),
		strings.Replace(text, "task 1 - -", "task 1 5 -", 1),
		strings.Replace(text, "fallback 0", "fallback 0,x", 1),
		strings.Replace(text, "rule numa", "rule magic", 1),
		strings.Replace(text, "numagpus 1 -", "numagpus 7 -", 1),
		text + "extra\n",
	} {
		if _, err := rule.Parse(bad); err == nil {
			t.Errorf("bad table parsed:\n%s", bad)
		}
	}
	var buf bytes.Buffer
	gpubind.ErrorTable(os.ErrNotExist).Encode(&buf)
	rt, err := rule.Parse(buf.String())
	if err != nil {
		t.Fatalf("error table: %v", err)
	}
	defer rt.Close()
	if _, err := rt.Apply(rule.Task{}); err == nil || !strings.Contains(err.Error(), "status error") {
		t.Errorf("error table applied: %v", err)
	}
}

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

// The NIC's port for NCCL_IB_HCA/UCX_NET_DEVICES is its first ACTIVE port, not always 1.
func TestNICActivePort(t *testing.T) {
	root := t.TempDir()
	if out, err := exec.Command("cp", "-a", fixtures.Root("dgxh100")+"/.", root).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	ports := filepath.Join(root, "sys/class/infiniband/mlx5_0/ports")
	if err := os.WriteFile(filepath.Join(ports, "1", "state"), []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ports, "2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ports, "2", "state"), []byte("4: ACTIVE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	topo, err := gpubind.DiscoverSysfs(root)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 2, Option: "closest,nic", Gres: &gpubind.GresConf{AutoDetect: "nvml"}})
	if err != nil {
		t.Fatal(err)
	}
	if tab.GPUs[0].NIC != "mlx5_0:2" || tab.GPUs[1].NIC != "mlx5_1:1" {
		t.Errorf("NIC fields %q %q, want mlx5_0:2 (port 1 down) and mlx5_1:1", tab.GPUs[0].NIC, tab.GPUs[1].NIC)
	}
}

// ParseMode takes the words of the plugstack and the request, "" as the default, and
// names any other value; String writes the word back.
func TestParseMode(t *testing.T) {
	for in, want := range map[string]gpubind.Mode{"": gpubind.ModeEnforce, "enforce": gpubind.ModeEnforce, "optional": gpubind.ModeOptional} {
		m, err := gpubind.ParseMode(in)
		if err != nil || m != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", in, m, err, want)
		}
		if in != "" && m.String() != in {
			t.Errorf("%q prints as %q", in, m.String())
		}
	}
	for _, in := range []string{"Optional", "maybe", " enforce"} {
		if _, err := gpubind.ParseMode(in); err == nil || !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("ParseMode(%q): %v, want an error naming the value", in, err)
		}
	}
}
