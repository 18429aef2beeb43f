package store_test

import (
	"fmt"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/store"
)

// benchBackends runs fn for each backend and body size.
func benchBackends(b *testing.B, fn func(b *testing.B, bk store.Bucket, body []byte)) {
	backends := []struct {
		name string
		open func(b *testing.B) store.Bucket
	}{
		{"Mem", func(*testing.B) store.Bucket { return store.NewMem() }},
		{"Dir", func(b *testing.B) store.Bucket { return openDir(b, b.TempDir(), store.DirOptions{}) }},
		{"DirNoSync", func(b *testing.B) store.Bucket { return openDir(b, b.TempDir(), store.DirOptions{NoSync: true}) }},
	}
	for _, be := range backends {
		for _, size := range []int{300 << 10, 3 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", be.name, size>>10), func(b *testing.B) {
				body := make([]byte, size)
				for i := range body {
					body[i] = byte(i * 7)
				}
				b.SetBytes(int64(size))
				fn(b, be.open(b), body)
			})
		}
	}
}

func BenchmarkPut(b *testing.B) {
	benchBackends(b, func(b *testing.B, bk store.Bucket, body []byte) {
		etag := ""
		for b.Loop() {
			var err error
			if etag, err = bk.Put(b.Context(), "rooms/chat/lobby/snapshot", body, store.IfMatch(etag)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGet(b *testing.B) {
	benchBackends(b, func(b *testing.B, bk store.Bucket, body []byte) {
		if _, err := bk.Put(b.Context(), "rooms/chat/lobby/snapshot", body, store.Cond{}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, _, err := bk.Get(b.Context(), "rooms/chat/lobby/snapshot"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
