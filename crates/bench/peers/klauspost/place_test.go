package main

import (
	"testing"
	"unsafe"
)

// The chunks lie where the Rust side's Chunk::placed puts them: 64·(slot mod 64) bytes past a
// page boundary, with their length and no spare capacity.
func TestPlaceOffsets(t *testing.T) {
	for _, n := range []int{1, 63, 4096, 131072 + 7} {
		for _, slot := range []int{0, 1, 5, 63, 64, 70} {
			b := place(n, slot)
			if len(b) != n || cap(b) != n {
				t.Fatalf("n %d slot %d: len %d cap %d", n, slot, len(b), cap(b))
			}
			got := int(uintptr(unsafe.Pointer(&b[0])) % 4096)
			if want := 64 * (slot % 64); got != want {
				t.Fatalf("n %d slot %d: offset %d, want %d", n, slot, got, want)
			}
			for _, x := range b {
				if x != 0 {
					t.Fatalf("n %d slot %d: not zeroed", n, slot)
				}
			}
		}
	}
}
