// bench/peers/go/main.go — the Go peer of the stepx benchmark suite
// (see docs/BENCHMARKS.md, the benchmark contract).
//
//	stepx-peer-go <yield|ring|pingpong|skynet|fanin|spawnidle|submit|wake|idle|timers> <n>
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
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// yield: stepx's yield is a process that yields a command which a handler
// completes at once, n times. The Go shape: a goroutine does n
// request/response round trips on unbuffered channels with a helper
// goroutine that answers at once.
func yield(n int64) bool {
	req := make(chan int64)
	resp := make(chan int64)
	go func() {
		for r := range req {
			resp <- r
		}
	}()
	res := make(chan int64)
	go func() {
		var got int64
		for i := int64(0); i < n; i++ {
			req <- i
			if <-resp == i {
				got++
			}
		}
		close(req)
		res <- got
	}()
	return <-res == n
}

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

// fanin: 2 producer goroutines each send n/2 messages on one channel (the
// consumer's mailbox; buffered, fanInBuffer slots) to one consumer, which
// counts them. Each producer reports how many it sent.
const fanInBuffer = 1024

func fanin(n int64) bool {
	ch := make(chan int64, fanInBuffer)
	sent := make(chan int64, 2)
	got := make(chan int64)
	go func() {
		var c int64
		for c < n {
			<-ch
			c++
		}
		got <- c
	}()
	for i := 0; i < 2; i++ {
		k := n / 2
		if i == 0 {
			k = n - n/2
		}
		go func(k int64) {
			var j int64
			for ; j < k; j++ {
				ch <- j
			}
			sent <- j
		}(k)
	}
	c := <-got
	return c == n && <-sent+<-sent == n
}

// wake: every 1 ms (after the previous sample was seen) the main goroutine
// sends the send time to a goroutine blocked on a channel receive, which
// records how long that took. Returns p50 (the figure) and the extra
// key=value text.
func wake(n int64) (bool, float64, string) {
	ch := make(chan time.Time, 1)
	lat := make([]time.Duration, n)
	var got int64
	done := make(chan struct{})
	go func() {
		for i := int64(0); i < n; i++ {
			t0 := <-ch
			lat[i] = time.Since(t0)
			atomic.StoreInt64(&got, i+1)
		}
		close(done)
	}()
	for i := int64(0); i < n; i++ {
		for {
			time.Sleep(time.Millisecond)
			if atomic.LoadInt64(&got) >= i {
				break
			}
		}
		ch <- time.Now()
	}
	<-done
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	p50 := float64(lat[(n-1)/2].Nanoseconds())
	p99 := float64(lat[(n*99+99)/100-1].Nanoseconds())
	mx := float64(lat[n-1].Nanoseconds())
	ok := atomic.LoadInt64(&got) == n && lat[0] > 0
	return ok, p50, fmt.Sprintf(" p50_us=%.2f p99_us=%.2f max_us=%.2f", p50/1e3, p99/1e3, mx/1e3)
}

// timers: n goroutines each sleep a random 1-50 ms (the same xorshift
// sequence as stepx_bench.c), then finish; each records how late it woke:
// now - (its start + the sleep). Wait for all with a WaitGroup. A
// reference: the timers target is absolute (docs/BENCHMARKS.md).
//
// The clock starts at the first goroutine, after the lateness array is
// made and written once (as stepx-bench does with its own): the array is
// the measurement, not the workload, and its first-touch page faults
// (800 KB) would otherwise fall in the timed run or not depending on when
// a runtime touches fresh memory.
func timers(n int64) (bool, string, float64) {
	var wg sync.WaitGroup
	late := make([]time.Duration, n)
	for i := range late {
		late[i] = -1
	}
	t0 := time.Now()
	x := uint64(88172645463325252)
	var maxMs uint64
	wg.Add(int(n))
	for i := int64(0); i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		ms := 1 + x%50
		if ms > maxMs {
			maxMs = ms
		}
		go func(i int64, d time.Duration) {
			t0 := time.Now()
			time.Sleep(d)
			late[i] = time.Since(t0) - d
			wg.Done()
		}(i, time.Duration(ms)*time.Millisecond)
	}
	wg.Wait()
	// The clock stops when every sleeper has finished: sorting the
	// lateness figures is analysis, not the workload (as in stepx-bench).
	secs := time.Since(t0).Seconds()
	sort.Slice(late, func(a, b int) bool { return late[a] < late[b] })
	ok := late[0] >= 0
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	return ok, fmt.Sprintf(" p50_late_ms=%.3f p99_late_ms=%.3f max_late_ms=%.3f longest_sleep_ms=%d",
		ms(late[(n-1)/2]), ms(late[(n*99+99)/100-1]), ms(late[n-1]), maxMs), secs
}

func cpuSecs() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// idle: the runtime started, one goroutine blocked on a channel (an idle
// process), nothing to do for n seconds: the CPU time used in that window.
func idle(n int64) (bool, float64, string) {
	ch := make(chan struct{})
	go func() { <-ch }()
	time.Sleep(10 * time.Millisecond)
	c0 := cpuSecs()
	time.Sleep(time.Duration(n) * time.Second)
	c1 := cpuSecs()
	close(ch)
	cpu := c1 - c0
	return c0 >= 0 && c1 >= 0, cpu * 1e9 / float64(n), fmt.Sprintf(" cpu_secs=%.4f", cpu)
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
		fmt.Fprintln(os.Stderr, "usage: stepx-peer-go <yield|ring|pingpong|skynet|fanin|spawnidle|submit|wake|idle|timers> <n>")
		os.Exit(2)
	}
	name := os.Args[1]
	n, err := strconv.ParseInt(os.Args[2], 10, 64)
	if err != nil || n <= 0 {
		fmt.Fprintln(os.Stderr, "stepx-peer-go: n must be a positive integer")
		os.Exit(2)
	}
	ok := false
	figure := -1.0  // ns_per_op when the workload sets its own
	secsOwn := -1.0 // the time, when the workload takes its own
	extra := ""
	t0 := time.Now()
	switch name {
	case "yield":
		ok = yield(n)
	case "fanin":
		ok = fanin(n)
	case "wake":
		ok, figure, extra = wake(n)
	case "idle":
		ok, figure, extra = idle(n)
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
	case "timers":
		ok, extra, secsOwn = timers(n)
	default:
		fmt.Fprintf(os.Stderr, "stepx-peer-go: unknown workload '%s'\n", name)
		os.Exit(2)
	}
	secs := time.Since(t0).Seconds()
	if secsOwn >= 0 {
		secs = secsOwn
	}
	okn := 0
	if ok {
		okn = 1
	}
	ns := secs * 1e9 / float64(n)
	if figure >= 0 {
		ns = figure
	}
	ops := 0.0
	if ns > 0 {
		ops = 1e9 / ns
	}
	fmt.Printf("bench=%s runtime=go n=%d secs=%.6f ns_per_op=%.2f ops_per_sec=%.0f ok=%d gomaxprocs=%d%s\n",
		name, n, secs, ns, ops, okn, runtime.GOMAXPROCS(0), extra)
	if !ok {
		os.Exit(1)
	}
}
