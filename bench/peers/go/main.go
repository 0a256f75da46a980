// bench/peers/go/main.go — the Go peer of the stepx benchmark suite
// (see ../../../../shared/design/BENCHMARKS.md, the benchmark contract).
//
//	stepx-peer-go <ring|pingpong|skynet|spawnidle|submit> <n>
//
// prints one line, the same as bench/stepx-bench:
//
//	bench=<name> runtime=go n=<n> secs=<s> ns_per_op=<ns> ops_per_sec=<ops> ok=<1|0> gomaxprocs=<k>
//
// and nothing else on stdout. Each workload has the same program shape as its
// stepx twin in bench/stepx_bench.c and checks its own result; ok=1 only when
// the check passed. GOMAXPROCS is left at its default (the number of cores).
// Build: go build -o <out> main.go
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// tokenRing: m goroutines in a ring pass a token n hops. The token starts at
// n-1 and each hop decrements it; whoever sees 0 sends a stop (-1) around
// once more and finishes, and each goroutine that sees the stop forwards it
// and finishes (as in stepx_bench.c's ring_step). Each channel holds one
// message, like a mailbox, so the last stop sent to the goroutine that
// started it (already gone) does not block. Every goroutine reports how
// many messages it saw; the total is n tokens + m-1 stops.
func tokenRing(m int, n int64) bool {
	ch := make([]chan int64, m)
	for i := range ch {
		ch[i] = make(chan int64, 1)
	}
	seen := make(chan int64, m)
	for i := 0; i < m; i++ {
		in, out := ch[i], ch[(i+1)%m]
		go func() {
			var s int64
			for {
				t := <-in
				s++
				if t <= 0 {
					out <- -1
					seen <- s
					return
				}
				out <- t - 1
			}
		}()
	}
	ch[0] <- n - 1
	var total int64
	for i := 0; i < m; i++ {
		total += <-seen
	}
	return total == n+int64(m)-1
}

// skynet: each goroutine spawns 10 children and sums what they send back on
// one channel; a leaf sends its number.
func skynet(c chan<- int64, num, size int64) {
	if size == 1 {
		c <- num
		return
	}
	rc := make(chan int64)
	sub := size / 10
	for i := int64(0); i < 10; i++ {
		go skynet(rc, num+i*sub, sub)
	}
	var sum int64
	for i := 0; i < 10; i++ {
		sum += <-rc
	}
	c <- sum
}

// spawnidle: n goroutines each wait on their own (1-slot) channel for one
// message; then each is sent one; wait for all with a WaitGroup.
func spawnidle(n int64) bool {
	var wg sync.WaitGroup
	var done int64
	chs := make([]chan struct{}, n)
	wg.Add(int(n))
	for i := range chs {
		c := make(chan struct{}, 1)
		chs[i] = c
		go func() {
			<-c
			atomic.AddInt64(&done, 1)
			wg.Done()
		}()
	}
	for _, c := range chs {
		c <- struct{}{}
	}
	wg.Wait()
	return atomic.LoadInt64(&done) == n
}

// submit: the closest shape to stepx's outside-thread submit: start n
// goroutines that each do one thing (count themselves) and finish; wait for
// all.
func submit(n int64) bool {
	var wg sync.WaitGroup
	var done int64
	wg.Add(int(n))
	for i := int64(0); i < n; i++ {
		go func() {
			atomic.AddInt64(&done, 1)
			wg.Done()
		}()
	}
	wg.Wait()
	return atomic.LoadInt64(&done) == n
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: stepx-peer-go <ring|pingpong|skynet|spawnidle|submit> <n>")
		os.Exit(2)
	}
	name := os.Args[1]
	n, err := strconv.ParseInt(os.Args[2], 10, 64)
	if err != nil || n <= 0 {
		fmt.Fprintln(os.Stderr, "stepx-peer-go: n must be a positive integer")
		os.Exit(2)
	}
	ok := false
	t0 := time.Now()
	switch name {
	case "ring":
		ok = tokenRing(503, n)
	case "pingpong":
		ok = tokenRing(2, n)
	case "skynet":
		c := make(chan int64)
		go skynet(c, 0, n)
		ok = <-c == n*(n-1)/2
	case "spawnidle":
		ok = spawnidle(n)
	case "submit":
		ok = submit(n)
	default:
		fmt.Fprintf(os.Stderr, "stepx-peer-go: unknown workload '%s'\n", name)
		os.Exit(2)
	}
	secs := time.Since(t0).Seconds()
	okn := 0
	if ok {
		okn = 1
	}
	fmt.Printf("bench=%s runtime=go n=%d secs=%.6f ns_per_op=%.2f ops_per_sec=%.0f ok=%d gomaxprocs=%d\n",
		name, n, secs, secs*1e9/float64(n), float64(n)/secs, okn, runtime.GOMAXPROCS(0))
	if !ok {
		os.Exit(1)
	}
}
