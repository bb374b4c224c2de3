// Command klauspost-peer runs github.com/klauspost/reedsolomon for `inec bench codec`.
//
// It reads one JSON request per line on stdin and answers one JSON line on stdout, so the
// Rust benchmark can alternate rounds between this library and the others in the same run.
// Data is generated with the same seeded splitmix64 stream as the Rust side (see fill), so
// both sides code identical bytes; parity is reported as CRC32C per parity chunk (and in full,
// hex, for the "parity" request) so the Rust side can check it equals its own Cauchy parity.
//
// Requests:
//
//	{"cmd":"info"}
//	{"cmd":"parity","k":4,"m":3,"chunk_bytes":16,"seed":1,"fill":"random"|"pattern"}
//	{"cmd":"prepare","id":1,"k":..,"m":..,"chunk_bytes":..,"sets":..,"seed":..,
//	 "op":"encode"|"decode1"|"decodem","pattern":"fresh"|"cached","threads":..,
//	 "isa":"native"|"avx2"|"avx512"|"avx2-gfni"|"avx512-gfni",
//	 "parity_matrix":[[..k bytes..] × m]}   (optional, also for "parity")
//
// Without "parity_matrix" the encoder uses the library's Cauchy matrix (ISA-L's
// gf_gen_cauchy1_matrix); with it, those m parity rows (WithCustomMatrix).
//
//	{"cmd":"run","id":1,"iters":N,"clock":"wall"|"cpu"}     -> {"ns":elapsed}
//
// Clock "cpu" times the run by the CPU time of the OS thread running it (the goroutine is
// locked to it; one thread only), from clock_gettime(CLOCK_THREAD_CPUTIME_ID) as the Rust
// side does.
//
//	{"cmd":"drop","id":1}
//
// Threads: the encoder is built with WithMaxGoroutines(1) so that it never splits a call by
// itself; with threads > 1 each call is split by byte range into `threads` goroutines (the
// calling one included), as the Rust side splits its calls. GOMAXPROCS is set by the caller.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/klauspost/cpuid/v2"
	"github.com/klauspost/reedsolomon"
)

type request struct {
	Cmd        string `json:"cmd"`
	ID         int    `json:"id"`
	K          int    `json:"k"`
	M          int    `json:"m"`
	ChunkBytes int    `json:"chunk_bytes"`
	Sets       int    `json:"sets"`
	Seed       uint64 `json:"seed"`
	Fill       string `json:"fill"`
	Op         string `json:"op"`
	Pattern    string `json:"pattern"`
	Threads    int    `json:"threads"`
	Iters      int    `json:"iters"`
	Isa        string `json:"isa"`
	Clock      string `json:"clock"`
	// Parity rows (m × k) for WithCustomMatrix; none: WithCauchyMatrix.
	ParityMatrix [][]int `json:"parity_matrix"`
}

type response struct {
	Error      string   `json:"error,omitempty"`
	Version    string   `json:"version,omitempty"`
	Kernel     string   `json:"kernel,omitempty"`
	GoMaxProcs int      `json:"gomaxprocs,omitempty"`
	Parity     []string `json:"parity,omitempty"`
	ParityCRC  []uint32 `json:"parity_crc32c,omitempty"`
	Verified   bool     `json:"verified,omitempty"`
	NS         int64    `json:"ns,omitempty"`
}

// The library version pinned in go.mod.
const libraryVersion = "v1.14.2"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// splitmix64 advances the state and returns the next value.
func splitmix64(state *uint64) uint64 {
	*state += 0x9E3779B97F4A7C15
	z := *state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// fill writes the data of chunk `chunk` of buffer set `set`: little-endian splitmix64 words
// from a state derived from (seed, set, chunk), the last word cut to the length.
func fill(seed, set, chunk uint64, buf []byte) {
	state := seed ^ (set * 0x9E3779B97F4A7C15) ^ (chunk * 0xC2B2AE3D27D4EB4F)
	var word [8]byte
	for off := 0; off < len(buf); off += 8 {
		binary.LittleEndian.PutUint64(word[:], splitmix64(&state))
		copy(buf[off:], word[:])
	}
}

// fillPattern writes the fixed test vector: byte b of data chunk j is (31·j + 7·b + 1) mod 256.
func fillPattern(chunk int, buf []byte) {
	for b := range buf {
		buf[b] = byte(31*chunk + 7*b + 1)
	}
}

// isaOptions turns off the library's kernels above the instruction-set level isa ("" or
// "native": its own choice). The library has no way to turn on what the CPU lacks; the Rust
// side refuses a level the CPU does not have.
func isaOptions(isa string) ([]reedsolomon.Option, error) {
	switch isa {
	case "", "native":
		return nil, nil
	case "avx2":
		return []reedsolomon.Option{reedsolomon.WithAVX512(false), reedsolomon.WithGFNI(false),
			reedsolomon.WithAVXGFNI(false)}, nil
	case "avx512":
		return []reedsolomon.Option{reedsolomon.WithGFNI(false), reedsolomon.WithAVXGFNI(false)}, nil
	case "avx2-gfni":
		return []reedsolomon.Option{reedsolomon.WithAVX512(false), reedsolomon.WithGFNI(false)}, nil
	case "avx512-gfni":
		return []reedsolomon.Option{reedsolomon.WithAVXGFNI(false)}, nil
	}
	return nil, fmt.Errorf("unknown isa %q", isa)
}

// kernel names the code path reedsolomon v1.14.2 dispatches to for this shape on this CPU at
// the level isa (its GFNI and AVX2 code generators handle at most 10 inputs and 10 outputs per
// pass).
func kernel(inputs, outputs int, isa string) string {
	small := inputs <= 10 && outputs <= 10
	native := isa == "" || isa == "native"
	avx512 := cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW) && (native || isa == "avx512" || isa == "avx512-gfni")
	gfni512 := avx512 && cpuid.CPU.Supports(cpuid.GFNI) && (native || isa == "avx512-gfni")
	gfni256 := cpuid.CPU.Supports(cpuid.AVX, cpuid.GFNI) && (native || isa == "avx2-gfni")
	switch {
	case small && gfni512:
		return "gfni-avx512"
	case small && gfni256:
		return "gfni-avx"
	case avx512:
		return "avx512"
	case cpuid.CPU.Supports(cpuid.AVX2):
		return "avx2"
	default:
		return "generic"
	}
}

func newEncoder(k, m int, cache bool, isa string, parityMatrix [][]int) (reedsolomon.Encoder, error) {
	opts, err := isaOptions(isa)
	if err != nil {
		return nil, err
	}
	if parityMatrix == nil {
		opts = append(opts, reedsolomon.WithCauchyMatrix())
	} else {
		if len(parityMatrix) != m {
			return nil, fmt.Errorf("parity_matrix has %d rows, want %d", len(parityMatrix), m)
		}
		rows := make([][]byte, m)
		for i, row := range parityMatrix {
			if len(row) != k {
				return nil, fmt.Errorf("parity_matrix row %d has %d entries, want %d", i, len(row), k)
			}
			rows[i] = make([]byte, k)
			for j, c := range row {
				if c < 0 || c > 255 {
					return nil, fmt.Errorf("parity_matrix entry %d is not a byte", c)
				}
				rows[i][j] = byte(c)
			}
		}
		opts = append(opts, reedsolomon.WithCustomMatrix(rows))
	}
	opts = append(opts,
		reedsolomon.WithMaxGoroutines(1),
		reedsolomon.WithInversionCache(cache))
	return reedsolomon.New(k, m, opts...)
}

// bench is one prepared configuration: buffer sets, the encoder, and what each call loses.
type bench struct {
	enc     reedsolomon.Encoder
	op      string
	k, m    int
	threads int
	// sets[s][i]: chunk i (data then parity) of buffer set s, full length.
	sets [][][]byte
	// lost: chunk indices a decode call rebuilds (empty for encode).
	lost []int
	// views[s][t][i]: chunk i of set s restricted to thread t's byte range.
	views [][][][]byte
	// shards[s][t]: the slice handed to ReconstructData for views[s][t], made once so that
	// a timed call allocates nothing of ours.
	shards [][][][]byte
}

func split(n, parts, t int) (int, int) {
	// Ranges are multiples of 64 bytes except the last, as on the Rust side.
	per := (n/parts + 63) &^ 63
	lo := t * per
	hi := lo + per
	if lo > n {
		lo = n
	}
	if hi > n || t == parts-1 {
		hi = n
	}
	return lo, hi
}

func lostChunks(op string, k, m int) ([]int, error) {
	switch op {
	case "encode":
		return nil, nil
	case "decode1":
		return []int{0}, nil
	case "decodem":
		if m > k {
			return nil, fmt.Errorf("decodem needs m <= k, have k=%d m=%d", k, m)
		}
		lost := make([]int, m)
		for i := range lost {
			lost[i] = i
		}
		return lost, nil
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

func prepare(q request) (*bench, response, error) {
	lost, err := lostChunks(q.Op, q.K, q.M)
	if err != nil {
		return nil, response{}, err
	}
	enc, err := newEncoder(q.K, q.M, q.Pattern != "fresh", q.Isa, q.ParityMatrix)
	if err != nil {
		return nil, response{}, err
	}
	threads := q.Threads
	if threads < 1 {
		threads = 1
	}
	// One OS thread per thread of the benchmark: GOMAXPROCS=1 for single-thread figures.
	runtime.GOMAXPROCS(threads)
	n := q.K + q.M
	b := &bench{enc: enc, op: q.Op, k: q.K, m: q.M, threads: threads, lost: lost}
	b.sets = make([][][]byte, q.Sets)
	for s := range b.sets {
		stripe := make([][]byte, n)
		for i := range stripe {
			stripe[i] = place(q.ChunkBytes, i)
			if i < q.K {
				fill(q.Seed, uint64(s), uint64(i), stripe[i])
			}
		}
		if err := enc.Encode(stripe); err != nil {
			return nil, response{}, err
		}
		b.sets[s] = stripe
	}
	b.views = make([][][][]byte, q.Sets)
	for s, stripe := range b.sets {
		b.views[s] = make([][][]byte, threads)
		for t := 0; t < threads; t++ {
			lo, hi := split(q.ChunkBytes, threads, t)
			v := make([][]byte, n)
			for i := range v {
				v[i] = stripe[i][lo:hi:hi]
			}
			b.views[s][t] = v
		}
	}
	b.shards = make([][][][]byte, q.Sets)
	for s := range b.views {
		b.shards[s] = make([][][]byte, threads)
		for t := range b.views[s] {
			b.shards[s][t] = make([][]byte, n)
		}
	}
	var resp response
	for _, p := range b.sets[0][q.K:] {
		resp.ParityCRC = append(resp.ParityCRC, crc32.Checksum(p, castagnoli))
	}
	// Check one call of exactly the timed shape: clobber what it writes, run, compare.
	want := make([][]byte, n)
	for i := range want {
		want[i] = append([]byte(nil), b.sets[0][i]...)
	}
	outs := b.lost
	if q.Op == "encode" {
		for i := q.K; i < n; i++ {
			outs = append(outs, i)
		}
	}
	for _, i := range outs {
		for j := range b.sets[0][i] {
			b.sets[0][i][j] = 0xA5
		}
	}
	if err := b.call(0); err != nil {
		return nil, response{}, err
	}
	for i := range want {
		if !bytes.Equal(want[i], b.sets[0][i]) {
			return nil, response{}, fmt.Errorf("%s: chunk %d differs from the expected bytes", q.Op, i)
		}
	}
	if ok, err := enc.Verify(b.sets[0]); err != nil || !ok {
		return nil, response{}, fmt.Errorf("parity does not verify after %s (%v)", q.Op, err)
	}
	resp.Verified = true
	resp.Kernel = kernel(q.K, q.M, q.Isa)
	if q.Op != "encode" {
		resp.Kernel = kernel(q.K, len(b.lost), q.Isa)
	}
	return b, resp, nil
}

// part runs one thread's byte range of one call on buffer set s.
func (b *bench) part(s, t int) error {
	v := b.views[s][t]
	if b.op == "encode" {
		return b.enc.Encode(v)
	}
	// A zero-length slice with capacity marks the chunk missing; reconstruction reuses its
	// memory instead of allocating.
	shards := b.shards[s][t]
	copy(shards, v)
	for _, i := range b.lost {
		shards[i] = v[i][:0]
	}
	return b.enc.ReconstructData(shards)
}

func (b *bench) call(s int) error {
	if b.threads == 1 {
		return b.part(s, 0)
	}
	var wg sync.WaitGroup
	errs := make([]error, b.threads)
	for t := 1; t < b.threads; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			errs[t] = b.part(s, t)
		}(t)
	}
	errs[0] = b.part(s, 0)
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// threadCPUNs is the CPU time the calling OS thread has run, in nanoseconds
// (clock_gettime(CLOCK_THREAD_CPUTIME_ID)).
func threadCPUNs() (int64, error) {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	_, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID,
		uintptr(unsafe.Pointer(&ts)), 0)
	if e != 0 {
		return 0, e
	}
	return ts.Nano(), nil
}

func (b *bench) run(iters int, clock string) (int64, error) {
	sets := len(b.sets)
	if clock == "cpu" {
		if b.threads != 1 {
			return 0, fmt.Errorf("clock cpu times one thread, not %d", b.threads)
		}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		start, err := threadCPUNs()
		if err != nil {
			return 0, err
		}
		for i := 0; i < iters; i++ {
			if err := b.call(i % sets); err != nil {
				return 0, err
			}
		}
		end, err := threadCPUNs()
		return end - start, err
	}
	start := time.Now()
	for i := 0; i < iters; i++ {
		if err := b.call(i % sets); err != nil {
			return 0, err
		}
	}
	return time.Since(start).Nanoseconds(), nil
}

// place returns n zero bytes at 64·(slot mod 64) bytes past a page boundary, as the Rust
// side's Chunk::placed (crates/bench/src/codec/data.rs) places chunk `slot` of a stripe, so
// that every library runs on the same layout. Go's heap does not move objects, so the
// address stays where it was measured.
func place(n, slot int) []byte {
	const page = 4096
	off := 64 * (slot % (page / 64))
	buf := make([]byte, n+off+page)
	start := (page - int(uintptr(unsafe.Pointer(&buf[0]))%page)) % page
	start += off
	return buf[start : start+n : start+n]
}

func parity(q request) (response, error) {
	enc, err := newEncoder(q.K, q.M, true, "", q.ParityMatrix)
	if err != nil {
		return response{}, err
	}
	stripe := make([][]byte, q.K+q.M)
	for i := range stripe {
		stripe[i] = make([]byte, q.ChunkBytes)
		if i < q.K {
			if q.Fill == "pattern" {
				fillPattern(i, stripe[i])
			} else {
				fill(q.Seed, 0, uint64(i), stripe[i])
			}
		}
	}
	if err := enc.Encode(stripe); err != nil {
		return response{}, err
	}
	var resp response
	for _, p := range stripe[q.K:] {
		resp.Parity = append(resp.Parity, hex.EncodeToString(p))
		resp.ParityCRC = append(resp.ParityCRC, crc32.Checksum(p, castagnoli))
	}
	return resp, nil
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<16), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	benches := map[int]*bench{}
	for in.Scan() {
		var q request
		var resp response
		var err error
		if err = json.Unmarshal(in.Bytes(), &q); err == nil {
			switch q.Cmd {
			case "info":
				resp.Version = libraryVersion
				resp.Kernel = kernel(1, 1, "")
				resp.GoMaxProcs = runtime.GOMAXPROCS(0)
			case "parity":
				resp, err = parity(q)
			case "prepare":
				var b *bench
				b, resp, err = prepare(q)
				if err == nil {
					benches[q.ID] = b
				}
			case "run":
				b, ok := benches[q.ID]
				if !ok {
					err = fmt.Errorf("no prepared benchmark %d", q.ID)
				} else {
					resp.NS, err = b.run(q.Iters, q.Clock)
				}
			case "drop":
				delete(benches, q.ID)
				runtime.GC()
			default:
				err = fmt.Errorf("unknown command %q", q.Cmd)
			}
		}
		if err != nil {
			resp = response{Error: err.Error()}
		}
		if e := enc.Encode(resp); e != nil {
			os.Exit(1)
		}
		if e := out.Flush(); e != nil {
			os.Exit(1)
		}
	}
}
