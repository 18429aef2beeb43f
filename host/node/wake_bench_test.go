package node

import (
	"context"
	"fmt"
	"math/bits"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/rooms/life"
	"github.com/wasmkeep/wasmkeep/host/snapshot"
	"github.com/wasmkeep/wasmkeep/internal/limits"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// BenchmarkGoChatWake measures what a request to a Go chat room
// (examples/chat) with 100 messages of history waits for after an idle
// hibernation, on a node with the local directory store (issue 13 §2):
// warm, the room's instance kept since its hibernation (rooms.Config
// WarmMemory, WarmFor) and resumed; image, its memory mapped from the
// image the node saved at the hibernation (rooms.Config.ImageDir, as after
// an idle longer than WarmFor); store, restored from the store's segments
// with no image (as on a node that did not hibernate it, or after a
// crash); restart-*, the first wake after a clean restart of the node
// (below). Every wake serves the page, which changes the room's memory,
// so every hibernation writes a delta and the chain of segments grows
// until the next compaction: chain=1 compacts at every hibernation
// (MaxChain 1), chain=8 is the default bound, chain=32 a long one (up to
// the dead-bytes rule). segments is the mean chain a wake read,
// stored-pages the 4 KiB pages its manifest stores, decoded-pages those a
// restore from the store decompresses (the blobs' pages, dead ones
// included); resumed and imaged are the shares of wakes that resumed a
// kept instance and that mapped an image; hibernate-p50-µs is the
// hibernations' (for restart-*, the stops').
//
//	go test -run '^$' -bench GoChatWake -benchtime 500x -count 2 ./host/node/
func BenchmarkGoChatWake(b *testing.B) {
	for _, chain := range []int{1, 8, 32} {
		for _, wake := range []string{"store", "image", "warm"} {
			b.Run(fmt.Sprintf("chain=%d/%s", chain, wake), func(b *testing.B) { benchGoChatWake(b, chain, wake) })
		}
	}
	// An option for the store's path, against chain=8/store of the same
	// run: zstd segments instead of S2 (the default).
	b.Run("chain=8/store-zstd", func(b *testing.B) { benchGoChatWake(b, 8, "store-zstd") })
	// The first wake after a clean restart of the node (each iteration
	// stops the node, which hibernates the room and closes its socket,
	// and starts it again on the same data directory, then loads the
	// class, as the node's first wake of any room of it would): from the
	// image the stop kept, or from the store (as after a crash).
	for _, wake := range []string{"restart-store", "restart-image"} {
		b.Run("chain=8/"+wake, func(b *testing.B) { benchGoChatWake(b, 8, wake) })
	}
}

func benchGoChatWake(b *testing.B, chain int, wake string) {
	ctx := context.Background()
	cfg := rooms.Config{MaxChain: chain}
	if wake != "warm" {
		cfg.WarmMemory = limits.Off
	}
	restart := strings.HasPrefix(wake, "restart-")
	if wake != "image" && wake != "restart-image" {
		cfg.ImageBytes = limits.Off
	}
	if wake == "store-zstd" {
		cfg.Codec = snapshot.Zstd
	}
	ncfg := Config{DataDir: b.TempDir(), Logger: quietLogger(), Rooms: cfg}
	n := startNode(b, ncfg)
	if _, err := n.Classes.Put(ctx, "chat", buildGuest(b, "./examples/chat"), classes.Options{}); err != nil {
		b.Fatal(err)
	}
	key := rooms.Key{Class: "chat", Name: "bench"}
	ws := wstest.Dial(b, n.URL()+"/actor/chat/bench")
	for i := range 100 {
		msg := fmt.Sprintf("message number %d from a chat user", i)
		ws.Send(msg)
		if got := ws.ReadText(); got != msg {
			b.Fatalf("echo: %q", got)
		}
	}
	// The socket stays open, so the room hibernates with it (parked in a
	// cluster), as a chat room's does. Serving the page leaves garbage
	// all over the Go heap, which a snapshot stores: 500 requests first
	// bring the room to what many wakes leave (some 700 stored pages), so
	// that the figure does not depend on the benchmark's count.
	manifestKey := "rooms/chat/bench/manifest"
	get := abi.AppendRequest(nil, &abi.Request{Method: "GET", Path: "/"})
	for range 500 {
		if _, err := n.Rooms.Request(ctx, key, get); err != nil {
			b.Fatal(err)
		}
	}
	resumes := func() float64 { return benchMetric(b, n, "wasmkeep_room_resumes_total") }
	imaged := func() float64 { return benchMetric(b, n, "wasmkeep_room_image_restores_total") }
	r0, i0 := resumes(), imaged()
	spares := func() float64 { return float64(n.Engine.Stats().SpareRestores) }
	s0 := spares()
	var ds, hs []time.Duration // wakes, hibernations
	segments, stored, decoded := 0, 0, 0
	for b.Loop() {
		b.StopTimer()
		hstart := time.Now()
		var err error
		if restart {
			err = n.Stop(ctx)
		} else {
			err = n.Rooms.HandOver(ctx, key, life.EndIdle)
		}
		if err != nil {
			b.Fatal(err)
		}
		hs = append(hs, time.Since(hstart))
		if restart {
			r, i, sp := resumes()-r0, imaged()-i0, spares()-s0
			n = startNode(b, ncfg)
			r0, i0, s0 = resumes()-r, imaged()-i, spares()-sp // counted across the nodes
			if _, err := n.Classes.Current(ctx, "chat"); err != nil {
				b.Fatal(err)
			}
		}
		body, _, err := n.Bucket.Get(ctx, manifestKey)
		if err != nil {
			b.Fatal(err)
		}
		man, err := snapshot.DecodeManifest(body)
		if err != nil {
			b.Fatal(err)
		}
		segments += len(man.Segments)
		_, st, _ := man.Pages()
		stored += st
		for _, c := range man.Chunks {
			for _, p := range c.Parts {
				decoded += bits.OnesCount16(p.Blob)
			}
		}
		time.Sleep(5 * time.Millisecond) // the pool refills, as between spaced wakes
		b.StartTimer()
		start := time.Now()
		resp, err := n.Rooms.Request(ctx, key, get)
		if err != nil || resp.Status != http.StatusOK {
			b.Fatalf("wake: %v %v", resp, err)
		}
		ds = append(ds, time.Since(start))
	}
	reportPercentiles(b, ds)
	slices.Sort(hs)
	b.ReportMetric(float64(hs[len(hs)/2].Microseconds()), "hibernate-p50-µs")
	b.ReportMetric(float64(segments)/float64(len(ds)), "segments")
	b.ReportMetric((resumes()-r0)/float64(len(ds)), "resumed")
	b.ReportMetric((imaged()-i0)/float64(len(ds)), "imaged")
	b.ReportMetric((spares()-s0)/float64(len(ds)), "into-spare")
	b.ReportMetric(float64(stored)/float64(len(ds)), "stored-pages")
	b.ReportMetric(float64(decoded)/float64(len(ds)), "decoded-pages")
}
