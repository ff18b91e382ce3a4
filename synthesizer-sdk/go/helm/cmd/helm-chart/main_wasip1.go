//go:build wasip1

// For wasip1 the module is a WASI reactor (`go build -buildmode=c-shared`): `_initialize`
// runs Go's runtime and every package's init (Helm's engine, Sprig, jsonschema: more than
// the render itself), and the `_start` export renders. enoki calls
// `_initialize` before `_start`; `enoki module preinit` runs `_initialize` once at build
// time and snapshots the initialized module (Wizer), so a run starts at `_start`.
//
// What Go reads once at init is the snapshot's in every run, so `_start` takes this run's
// again: the environment (read from WASI), GOGC and GOMEMLIMIT from it, and a seed for
// math/rand's global source (Sprig's randInt, shuffle) from crypto/rand, which reads the
// run's randomness. Map iteration order and math/rand/v2 stay the snapshot's; os.Args is
// the snapshot's (`synthesizer`).

//go:debug randseednop=0

package main

import (
	"crypto/rand"
	"encoding/binary"
	"math"
	mathrand "math/rand"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"unsafe"
)

func main() {}

// A render allocates a few MiB over a live heap of a few MiB: it collects only once what Go
// allocates reaches a soft 64 MiB (GOGC=off with GOMEMLIMIT=64MiB; the static data comes on
// top), so most renders never collect, and a large chart collects near the limit. GOGC or
// GOMEMLIMIT in the environment replace both, as they would at Go's start.
const (
	renderGCPercent   = -1
	renderMemoryLimit = 64 << 20
)

//go:wasmexport _start
func start() {
	debug.SetGCPercent(renderGCPercent)
	debug.SetMemoryLimit(renderMemoryLimit)
	reloadEnviron()
	reseed()
	render()
}

//go:wasmimport wasi_snapshot_preview1 environ_sizes_get
func environSizesGet(count, size unsafe.Pointer) uint32

//go:wasmimport wasi_snapshot_preview1 environ_get
func environGet(environ, buf unsafe.Pointer) uint32

// reloadEnviron replaces the environment Go read at init with this run's, and applies its
// GOGC and GOMEMLIMIT, when either is set, as the runtime would have at start-up.
func reloadEnviron() {
	var count, size uint32
	if environSizesGet(unsafe.Pointer(&count), unsafe.Pointer(&size)) != 0 {
		return
	}
	os.Clearenv()
	if count > 0 && size > 0 {
		ptrs := make([]uint32, count)
		buf := make([]byte, size)
		if environGet(unsafe.Pointer(&ptrs[0]), unsafe.Pointer(&buf[0])) == 0 {
			for _, kv := range strings.Split(strings.TrimSuffix(string(buf), "\x00"), "\x00") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					_ = os.Setenv(k, v)
				}
			}
		}
	}
	gogc, hasGC := os.LookupEnv("GOGC")
	limit, hasLimit := os.LookupEnv("GOMEMLIMIT")
	if !hasGC && !hasLimit {
		return
	}
	// As at Go's start: unset or unreadable is Go's default (100, no limit).
	percent := 100
	if gogc == "off" {
		percent = -1
	} else if n, err := strconv.Atoi(gogc); err == nil {
		percent = n
	}
	debug.SetGCPercent(percent)
	bytes, ok := memoryLimit(limit)
	if !ok {
		bytes = math.MaxInt64
	}
	debug.SetMemoryLimit(bytes)
}

// memoryLimit reads GOMEMLIMIT as the runtime does: "off", or bytes with an optional B, KiB,
// MiB, GiB or TiB suffix.
func memoryLimit(v string) (int64, bool) {
	if v == "" {
		return 0, false
	}
	if v == "off" {
		return math.MaxInt64, true
	}
	unit := int64(1)
	for i, suffix := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if strings.HasSuffix(v, suffix) {
			unit = int64(1) << (10 * (4 - i))
			v = strings.TrimSuffix(v, suffix)
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/unit {
		return 0, false
	}
	return n * unit, true
}

// reseed seeds math/rand's global source from this run's randomness (the snapshot's would
// be the same in every run).
func reseed() {
	var b [8]byte
	if _, err := rand.Read(b[:]); err == nil {
		mathrand.Seed(int64(binary.LittleEndian.Uint64(b[:])))
	}
}
