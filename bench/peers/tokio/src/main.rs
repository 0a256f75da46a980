//! bench/peers/tokio/src/main.rs — the Tokio peer of the stepx benchmark
//! suite (docs/BENCHMARKS.md: the workloads, the method and the targets).
//!
//!     stepx-peer-tokio <ring|pingpong|skynet|fanin|spawnidle> <n> [unbounded|bounded]
//!
//! prints one line, the same as bench/stepx-bench:
//!
//!     bench=<name> runtime=tokio n=<n> secs=<s> ns_per_op=<ns> ops_per_sec=<ops> ok=<1|0> workers=<k> mailbox=<kind>
//!
//! Each workload has the program shape of its Go twin (bench/peers/go/
//! main.go): tasks instead of goroutines, tokio::sync::mpsc channels as
//! mailboxes (unbounded by default; `bounded` gives each the Go channel's
//! capacity), a multi-thread runtime with one worker per core. Every
//! workload runs inside a spawned task, so that no wake-up crosses to the
//! thread that called block_on.
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// A mailbox: unbounded, or bounded with Go's capacity for the workload.
enum Tx {
    U(mpsc::UnboundedSender<i64>),
    B(mpsc::Sender<i64>),
}
enum Rx {
    U(mpsc::UnboundedReceiver<i64>),
    B(mpsc::Receiver<i64>),
}

impl Tx {
    async fn send(&self, v: i64) -> bool {
        match self {
            Tx::U(t) => t.send(v).is_ok(),
            Tx::B(t) => t.send(v).await.is_ok(),
        }
    }
}

impl Rx {
    async fn recv(&mut self) -> Option<i64> {
        match self {
            Rx::U(r) => r.recv().await,
            Rx::B(r) => r.recv().await,
        }
    }
}

fn mailbox(bounded: bool, cap: usize) -> (Tx, Rx) {
    if bounded {
        let (t, r) = mpsc::channel(cap);
        (Tx::B(t), Rx::B(r))
    } else {
        let (t, r) = mpsc::unbounded_channel();
        (Tx::U(t), Rx::U(r))
    }
}

/// tokenRing: m tasks in a ring pass a token n hops; the token starts at
/// n-1 and each hop decrements it; whoever sees 0 sends a stop (-1) around
/// once more. Every task reports how many tokens it saw: the total is
/// n + m - 1.
async fn token_ring(m: usize, n: i64, bounded: bool) -> bool {
    let mut txs = Vec::with_capacity(m);
    let mut rxs = Vec::with_capacity(m);
    for _ in 0..m {
        let (t, r) = mailbox(bounded, 1);
        txs.push(Some(t));
        rxs.push(Some(r));
    }
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel::<i64>();
    let first = match &txs[0] {
        Some(Tx::U(t)) => Tx::U(t.clone()),
        Some(Tx::B(t)) => Tx::B(t.clone()),
        None => unreachable!(),
    };
    for i in 0..m {
        let mut rx = rxs[i].take().unwrap();
        let out = txs[(i + 1) % m].take().unwrap_or_else(|| match &first {
            Tx::U(t) => Tx::U(t.clone()),
            Tx::B(t) => Tx::B(t.clone()),
        });
        let seen = seen_tx.clone();
        tokio::spawn(async move {
            let mut s = 0i64;
            while let Some(t) = rx.recv().await {
                s += 1;
                if t <= 0 {
                    out.send(-1).await;
                    break;
                }
                out.send(t - 1).await;
            }
            let _ = seen.send(s);
        });
    }
    drop(seen_tx);
    first.send(n - 1).await;
    drop(first);
    let mut total = 0i64;
    for _ in 0..m {
        total += seen_rx.recv().await.unwrap_or(0);
    }
    total == n + m as i64 - 1
}

/// skynet: each task spawns 10 children and sums what they send back on
/// one channel; a leaf sends its number.
fn skynet(c: mpsc::UnboundedSender<i64>, num: i64, size: i64) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if size == 1 {
            let _ = c.send(num);
            return;
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<i64>();
        let sub = size / 10;
        for i in 0..10 {
            skynet(tx.clone(), num + i * sub, sub);
        }
        drop(tx);
        let mut sum = 0i64;
        for _ in 0..10 {
            sum += rx.recv().await.unwrap_or(0);
        }
        let _ = c.send(sum);
    })
}

/// fanin: 2 producer tasks each send n/2 messages to one consumer, which
/// counts them (bounded: Go's 1,024 slots).
async fn fanin(n: i64, bounded: bool) -> bool {
    let (tx, mut rx) = mailbox(bounded, 1024);
    let tx = Arc::new(tx);
    let consumer = tokio::spawn(async move {
        let mut c = 0i64;
        while c < n {
            if rx.recv().await.is_none() {
                break;
            }
            c += 1;
        }
        c
    });
    let mut producers = Vec::new();
    for i in 0..2 {
        let k = if i == 0 { n - n / 2 } else { n / 2 };
        let tx = tx.clone();
        producers.push(tokio::spawn(async move {
            let mut j = 0i64;
            while j < k {
                if !tx.send(j).await {
                    break;
                }
                j += 1;
            }
            j
        }));
    }
    let mut sent = 0i64;
    for p in producers {
        sent += p.await.unwrap_or(0);
    }
    consumer.await.unwrap_or(0) == n && sent == n
}

/// spawnidle: n tasks, each waiting on its own one-message mailbox; then
/// one message to each, and every task counts itself and ends.
async fn spawnidle(n: i64, bounded: bool) -> bool {
    let done = Arc::new(AtomicI64::new(0));
    let mut txs = Vec::with_capacity(n as usize);
    let mut handles = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let (t, mut r) = mailbox(bounded, 1);
        txs.push(t);
        let d = done.clone();
        handles.push(tokio::spawn(async move {
            r.recv().await;
            // relaxed: a count read after every task has been awaited.
            d.fetch_add(1, Ordering::Relaxed);
        }));
    }
    for t in &txs {
        t.send(1).await;
    }
    for h in handles {
        let _ = h.await;
    }
    done.load(Ordering::Relaxed) == n
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: stepx-peer-tokio <ring|pingpong|skynet|fanin|spawnidle> <n> [unbounded|bounded]");
        std::process::exit(2);
    }
    let name = args[1].clone();
    let n: i64 = match args[2].parse() {
        Ok(v) if v > 0 => v,
        _ => {
            eprintln!("stepx-peer-tokio: n must be a positive integer");
            std::process::exit(2);
        }
    };
    let bounded = args.get(3).map(|s| s == "bounded").unwrap_or(false);
    let workers = std::thread::available_parallelism().map(|p| p.get()).unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .build()
        .expect("a runtime");
    let t0 = Instant::now();
    let nm = name.clone();
    let ok = rt.block_on(async move {
        let task = tokio::spawn(async move {
            match nm.as_str() {
                "ring" => token_ring(503, n, bounded).await,
                "pingpong" => token_ring(2, n, bounded).await,
                "skynet" => {
                    let (tx, mut rx) = mpsc::unbounded_channel::<i64>();
                    skynet(tx, 0, n);
                    rx.recv().await == Some(n * (n - 1) / 2)
                }
                "fanin" => fanin(n, bounded).await,
                "spawnidle" => spawnidle(n, bounded).await,
                _ => {
                    eprintln!("stepx-peer-tokio: unknown workload '{}'", nm);
                    std::process::exit(2);
                }
            }
        });
        task.await.unwrap_or(false)
    });
    let secs = t0.elapsed().as_secs_f64();
    let ns = secs * 1e9 / n as f64;
    println!(
        "bench={} runtime=tokio n={} secs={:.6} ns_per_op={:.2} ops_per_sec={:.0} ok={} workers={} mailbox={}",
        name,
        n,
        secs,
        ns,
        if ns > 0.0 { 1e9 / ns } else { 0.0 },
        if ok { 1 } else { 0 },
        workers,
        if bounded { "bounded" } else { "unbounded" }
    );
    if !ok {
        std::process::exit(1);
    }
}
