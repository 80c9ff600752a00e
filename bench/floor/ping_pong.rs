//! The machine's own floor under a lone request's latency: a loopback TCP round trip between two
//! threads (`TCP_NODELAY`, blocking sockets, no TLS, no HTTP; 64 bytes each way unless sizes are
//! given, e.g. those of a real request and its answer), the answering
//! thread spinning `SPIN_US` before each answer as a model run on the request's thread would.
//! With no spin the round trips run back to back, every thread hot; with a spin of a model's
//! length (~10 ms) the asking thread sleeps meanwhile and its core idles, so each answer has to
//! wake it, and the answering thread's next request has to wake that one. `bench/latency_floor.py`
//! prints the difference: what a request pays on this machine for the idle time alone, which
//! back-to-back runs in process never pay.
//!
//! Usage: ping_pong SPIN_US SECONDS [REQUEST_BYTES ANSWER_BYTES]
//! Prints `added_p50_us <round trip p50 less the spin, in µs> rounds <count>`.

use anyhow::Context as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

#[path = "support/spin.rs"]
mod spin;
use spin::spin_for;

fn answer(mut conn: TcpStream, spin: Duration, sizes: (usize, usize)) -> std::io::Result<()> {
    let (mut request, reply) = (vec![0u8; sizes.0], vec![1u8; sizes.1]);
    loop {
        conn.read_exact(&mut request)?;
        spin_for(spin);
        conn.write_all(&reply)?;
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (spin_us, seconds, sizes) = match &args[..] {
        [_, spin, seconds] => (spin, seconds, (64, 64)),
        [_, spin, seconds, request, answer] => (
            spin,
            seconds,
            (
                request.parse().context("REQUEST_BYTES")?,
                answer.parse().context("ANSWER_BYTES")?,
            ),
        ),
        _ => anyhow::bail!("usage: ping_pong SPIN_US SECONDS [REQUEST_BYTES ANSWER_BYTES]"),
    };
    anyhow::ensure!(sizes.0 > 0 && sizes.1 > 0, "sizes must be at least 1 byte");
    let spin = Duration::from_micros(spin_us.parse().context("SPIN_US")?);
    let run_for = Duration::from_secs_f64(seconds.parse().context("SECONDS")?);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        if let Ok((conn, _)) = listener.accept() {
            let _ = conn.set_nodelay(true);
            // Ends when the asking side closes the connection.
            let _ = answer(conn, spin, sizes);
        }
    });
    let mut conn = TcpStream::connect(addr)?;
    conn.set_nodelay(true)?;
    let (request, mut reply) = (vec![2u8; sizes.0], vec![0u8; sizes.1]);
    let mut added = Vec::new();
    let stop = Instant::now() + run_for;
    while Instant::now() < stop {
        let sent = Instant::now();
        conn.write_all(&request)?;
        conn.read_exact(&mut reply)?;
        added.push(sent.elapsed().saturating_sub(spin));
    }
    // The first few warm the connection up.
    let mut added = added.split_off(added.len().min(10));
    anyhow::ensure!(
        !added.is_empty(),
        "no round trips measured: give it more SECONDS"
    );
    added.sort_unstable();
    let p50 = added[added.len() / 2];
    println!(
        "added_p50_us {:.1} rounds {}",
        p50.as_secs_f64() * 1e6,
        added.len()
    );
    Ok(())
}
