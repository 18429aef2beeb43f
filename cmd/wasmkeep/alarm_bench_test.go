//go:build unix

package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Alarms at scale: benchAlarms rooms each set one alarm, through the three
// nodes in turn. benchFiring of them are due over firingWindow, starting
// firingAfter the first is set; the others an hour later, so that all
// benchAlarms are pending throughout. While every alarm is pending the
// nodes idle for a minute (what the pending alarms cost an idle node);
// then the first ones fire. The figures (docs/PERFORMANCE.md, "Alarms"):
// how late the alarms ran, from the nodes' histograms of their deliveries
// and from the handlers' own reading of a sample of rooms, and the bucket
// requests an idle node makes a minute and a fired alarm costs, by key.
const (
	benchAlarms  = 10000
	benchFiring  = 1000
	firingAfter  = 4 * time.Minute
	firingWindow = 100 * time.Second
	alarmsSample = 300
)

// BenchmarkClusterAlarms runs once per -benchtime (1x); on versitygw, with
// -v for the requests by key:
//
//	WASMKEEP_TEST_STORE=s3 go test -run '^$' -bench 'BenchmarkClusterAlarms$' -benchtime 1x -v -timeout 30m ./cmd/wasmkeep/
func BenchmarkClusterAlarms(b *testing.B) {
	started := time.Now()
	c, proxies := benchCluster(b, "--idle-timeout", "3s", "--max-resident", "300")
	c.putClass(c.nodes[0], "alarm", "./testdata/guests/alarm", false)
	for b.Loop() {
		set := time.Now()
		first := set.Add(firingAfter)
		var (
			wg      sync.WaitGroup
			next    = make(chan int)
			errOnce firstErr
		)
		for range 32 {
			wg.Go(func() {
				for i := range next {
					n := c.nodes[i%len(c.nodes)]
					at := first.Add(time.Duration(i) * firingWindow / benchFiring).UnixMilli()
					if i >= benchFiring {
						at = first.Add(time.Hour).UnixMilli()
					}
					resp, err := e2eClient.Post(n.url+"/actor/alarm/a"+strconv.Itoa(i)+"/set?at="+strconv.FormatInt(at, 10), "", nil)
					if err == nil {
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							err = fmt.Errorf("%d %s", resp.StatusCode, body)
						}
					}
					if err != nil {
						errOnce.set(fmt.Errorf("setting alarm %d: %w", i, err))
					}
				}
			})
		}
		for i := range benchAlarms {
			next <- i
		}
		close(next)
		wg.Wait()
		if errOnce.err != nil {
			b.Fatal(errOnce.err)
		}
		b.Logf("%d alarms set through 3 nodes in %v", benchAlarms, time.Since(set).Round(time.Millisecond))

		// A minute with every alarm pending, once the rooms hibernated and
		// the nodes' first orphan sweep (which reads every room's record
		// and manifest, a minute after a start and then every 30 minutes)
		// is over.
		time.Sleep(time.Until(started.Add(75 * time.Second)))
		quiet(b, c)
		idle, minutes := idleMinute(b, c, proxies)
		if time.Now().After(first) {
			b.Fatalf("the idle minute ended %v after the first alarm was due", time.Since(first))
		}

		// The first ones fire.
		time.Sleep(time.Until(first) - time.Second)
		firing := countNow(b, c, proxies)
		fireStart := time.Now()
		deadline := first.Add(firingWindow + 2*time.Minute)
		var fired float64
		for {
			fired = 0
			for _, n := range c.nodes {
				fired += mustMetrics(b, n)["wasmkeep_alarms_fired_total"] - firing.metrics[n.name]["wasmkeep_alarms_fired_total"]
			}
			if fired >= benchFiring || time.Now().After(deadline) {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		took := time.Since(fireStart)
		var spent bucketOps
		late := map[string]float64{}
		var retried, stale float64
		for _, n := range c.nodes {
			after := mustMetrics(b, n)
			spent = spent.plus(opsOf(after).minus(opsOf(firing.metrics[n.name])))
			for k, v := range after {
				if rng, ok := strings.CutPrefix(k, `wasmkeep_alarms_late_seconds_bucket{vmrange="`); ok {
					late[strings.TrimSuffix(rng, `"}`)] += v - firing.metrics[n.name][k]
				}
			}
			retried += after["wasmkeep_alarms_retried_total"] - firing.metrics[n.name]["wasmkeep_alarms_retried_total"]
			stale += after["wasmkeep_alarms_stale_total"] - firing.metrics[n.name]["wasmkeep_alarms_stale_total"]
			if k := proxies[n.name]; k != nil {
				b.Logf("%s by key while the alarms fired, per alarm:%s", n.name, formatCounts(countsDelta(firing.keys[n.name], k.snapshot()), fired))
			}
		}
		if fired < benchFiring {
			b.Fatalf("%v of %d alarms fired within %v of the last one's time", fired, benchFiring, 2*time.Minute)
		}
		// What the firing cost beyond the nodes' idle requests.
		idleShare := bucketOps{idle.get / minutes * took.Minutes(), idle.put / minutes * took.Minutes(),
			idle.del / minutes * took.Minutes(), idle.list / minutes * took.Minutes()}
		per := spent.minus(idleShare)
		b.Logf("%v alarms fired in %v: %.2f GET, %.2f PUT, %.2f LIST, %.2f DELETE per alarm beyond the idle requests; %v retries, %v stale deliveries",
			fired, took.Round(time.Second), per.get/fired, per.put/fired, per.list/fired, per.del/fired, retried, stale)
		p50, p99 := vmPercentile(late, 0.5), vmPercentile(late, 0.99)
		b.Logf("lateness of the deliveries (the nodes' histograms, bucket upper bounds): p50 %v, p99 %v", p50, p99)

		// The handlers' own reading, for a sample of rooms.
		var handler []time.Duration
		rng := rand.New(rand.NewPCG(1, 2))
		for range alarmsSample {
			i := rng.IntN(benchFiring)
			n := c.nodes[rng.IntN(len(c.nodes))]
			resp, err := e2eClient.Get(n.url + "/actor/alarm/a" + strconv.Itoa(i) + "/runs")
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			f := strings.Fields(string(body))
			if len(f) != 6 || f[1] != "1" {
				b.Fatalf("room a%d: %q, want one run", i, f)
			}
			ms, _ := strconv.Atoi(f[5])
			handler = append(handler, time.Duration(ms)*time.Millisecond)
		}
		slices.Sort(handler)
		b.Logf("lateness the handlers saw (%d rooms): p50 %v, p99 %v, max %v", alarmsSample,
			handler[len(handler)/2], handler[len(handler)*99/100], handler[len(handler)-1])
		b.ReportMetric(p50.Seconds()*1000, "late-p50-ms")
		b.ReportMetric(p99.Seconds()*1000, "late-p99-ms")
		b.ReportMetric(float64(handler[len(handler)*99/100].Milliseconds()), "handler-late-p99-ms")
		b.ReportMetric((per.get+per.put+per.list+per.del)/fired, "requests/alarm")
		b.ReportMetric((idle.get+idle.put+idle.list+idle.del)/minutes/float64(len(c.nodes)), "requests/idle-node/min")
	}
}

func (o bucketOps) plus(p bucketOps) bucketOps {
	return bucketOps{o.get + p.get, o.put + p.put, o.del + p.del, o.list + p.list}
}

// quiet waits until no node has read more than 20 objects of the bucket
// in two seconds (the rooms hibernated, the first orphan sweep over).
func quiet(b *testing.B, c *testCluster) {
	b.Helper()
	gets := func() float64 {
		var n float64
		for _, node := range c.nodes {
			n += opsOf(mustMetrics(b, node)).get
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Minute)
	for last := gets(); ; {
		time.Sleep(2 * time.Second)
		now := gets()
		if now-last <= 20 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the nodes still read %v objects in 2 s after 5 minutes", now-last)
		}
		last = now
	}
}

// vmPercentile is the q quantile of a VictoriaMetrics histogram's counts by
// vmrange ("1.000e-03...1.136e-03"): the upper bound of the range it falls
// in.
func vmPercentile(counts map[string]float64, q float64) time.Duration {
	type bucket struct{ hi, n float64 }
	var bs []bucket
	total := 0.0
	for rng, n := range counts {
		_, hi, ok := strings.Cut(rng, "...")
		v, err := strconv.ParseFloat(hi, 64)
		if !ok || err != nil || n <= 0 {
			continue
		}
		bs = append(bs, bucket{v, n})
		total += n
	}
	slices.SortFunc(bs, func(a, b bucket) int { return int(math.Copysign(1, a.hi-b.hi)) })
	seen := 0.0
	for _, x := range bs {
		seen += x.n
		if seen >= q*total {
			return time.Duration(x.hi * float64(time.Second))
		}
	}
	return 0
}
