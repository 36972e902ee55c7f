package gpubind

import (
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"
)

// maxCPU bounds CPU ids accepted from any input, so that a hostile list such as
// "0-999999999" cannot make the engine allocate gigabytes.
const maxCPU = 1 << 16

// CPUSet is a set of CPU ids as a bitmap. The zero value is the empty set.
type CPUSet struct {
	w []uint64
}

// NewCPUSet returns the set holding cpus (ids outside 0..MaxCPU-1 are ignored).
func NewCPUSet(cpus ...int) CPUSet {
	var s CPUSet
	for _, c := range cpus {
		s.Add(c)
	}
	return s
}

// Add puts cpu into the set.
func (s *CPUSet) Add(cpu int) {
	if cpu < 0 || cpu >= maxCPU {
		return
	}
	for len(s.w) <= cpu/64 {
		s.w = append(s.w, 0)
	}
	s.w[cpu/64] |= 1 << (uint(cpu) % 64)
}

// Has reports whether cpu is in the set.
func (s CPUSet) Has(cpu int) bool {
	if cpu < 0 || cpu/64 >= len(s.w) {
		return false
	}
	return s.w[cpu/64]&(1<<(uint(cpu)%64)) != 0
}

// Count is the number of CPUs in the set.
func (s CPUSet) Count() int {
	n := 0
	for _, w := range s.w {
		n += bits.OnesCount64(w)
	}
	return n
}

// IsEmpty reports whether the set has no CPU.
func (s CPUSet) IsEmpty() bool { return s.Count() == 0 }

// IsZero is IsEmpty, for encoding/json's omitzero.
func (s CPUSet) IsZero() bool { return s.IsEmpty() }

// CPUs lists the members in increasing order.
func (s CPUSet) CPUs() []int {
	var out []int
	for i, w := range s.w {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			out = append(out, i*64+b)
			w &^= 1 << uint(b)
		}
	}
	return out
}

// Intersect returns s ∩ o.
func (s CPUSet) Intersect(o CPUSet) CPUSet {
	n := min(len(s.w), len(o.w))
	r := CPUSet{w: make([]uint64, n)}
	for i := 0; i < n; i++ {
		r.w[i] = s.w[i] & o.w[i]
	}
	return r
}

// Union returns s ∪ o.
func (s CPUSet) Union(o CPUSet) CPUSet {
	n := max(len(s.w), len(o.w))
	r := CPUSet{w: make([]uint64, n)}
	for i := 0; i < n; i++ {
		if i < len(s.w) {
			r.w[i] |= s.w[i]
		}
		if i < len(o.w) {
			r.w[i] |= o.w[i]
		}
	}
	return r
}

// Contains reports whether every CPU of o is in s.
func (s CPUSet) Contains(o CPUSet) bool {
	return o.Intersect(s).Count() == o.Count()
}

// Equal reports whether both sets hold the same CPUs.
func (s CPUSet) Equal(o CPUSet) bool { return s.Contains(o) && o.Contains(s) }

// String formats the set as a Linux CPU list ("0-3,8"); the empty set is "".
func (s CPUSet) String() string {
	cpus := s.CPUs()
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j == i {
			b.WriteString(strconv.Itoa(cpus[i]))
		} else {
			fmt.Fprintf(&b, "%d-%d", cpus[i], cpus[j])
		}
		i = j + 1
	}
	return b.String()
}

// Hex formats the set as a hex mask with 0x prefix, like Slurm's mask_cpu.
func (s CPUSet) Hex() string {
	cpus := s.CPUs()
	if len(cpus) == 0 {
		return "0x0"
	}
	nib := make([]byte, cpus[len(cpus)-1]/4+1)
	for _, c := range cpus {
		nib[c/4] |= 1 << uint(c%4)
	}
	var b strings.Builder
	b.WriteString("0x")
	for i := len(nib) - 1; i >= 0; i-- {
		b.WriteByte("0123456789abcdef"[nib[i]])
	}
	return b.String()
}

// MarshalText implements encoding.TextMarshaler (CPU list form).
func (s CPUSet) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (CPU list form).
func (s *CPUSet) UnmarshalText(b []byte) error {
	v, err := ParseCPUList(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseCPUList parses a Linux CPU list such as "0-3,8,10-11" (whitespace around it is
// ignored; "" is the empty set).
func ParseCPUList(list string) (CPUSet, error) {
	var s CPUSet
	list = strings.TrimSpace(list)
	if list == "" {
		return s, nil
	}
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseCPUNum(lo)
		if err != nil {
			return CPUSet{}, fmt.Errorf("CPU list %q: %w", list, err)
		}
		b := a
		if isRange {
			if b, err = parseCPUNum(hi); err != nil {
				return CPUSet{}, fmt.Errorf("CPU list %q: %w", list, err)
			}
			if b < a {
				return CPUSet{}, fmt.Errorf("CPU list %q: range %q runs backwards", list, part)
			}
		}
		for c := a; c <= b; c++ {
			s.Add(c)
		}
	}
	return s, nil
}

func parseCPUNum(t string) (int, error) {
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a CPU number", t)
	}
	if n >= maxCPU {
		return 0, fmt.Errorf("CPU %d is above the limit %d", n, maxCPU-1)
	}
	return n, nil
}

// sortedKeys returns the keys of an int-keyed map in increasing order.
func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}
