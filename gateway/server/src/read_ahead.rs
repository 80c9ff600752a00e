//! One socket read for what TLS would fetch in several.
//!
//! rustls reads its socket at most 4 KiB at a time (`DeframerVecBuffer::prepare_read` in
//! rustls 0.23), so a request that arrived whole still costs one `recvfrom` per 4 KiB: the
//! MLP of `bench/cpu_per_request.py` (4.6 KB per request: a 4 KiB tensor, its JSON head and
//! the HTTP head) was read as 4096 + 508 bytes, two system calls per inference. [`ReadAhead`]
//! sits between the socket and TLS and asks the socket for up to [`CAPACITY`] bytes whenever
//! TLS asks for less; what TLS did not take yet is served from memory. Requests a single read
//! covers then cost one `recvfrom` (and one wake-up) instead of one per 4 KiB.
//!
//! The buffer is let go whenever it is emptied, so an idle connection holds none of it.
//! Writes pass straight through.

use bytes::{Buf, BytesMut};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How much one socket read asks for: a full TLS record (16 KiB of plaintext and its
/// overhead) with room to spare, so a record that arrived whole is read at once.
pub const CAPACITY: usize = 32 * 1024;

/// A socket whose reads are buffered ahead of TLS.
pub struct ReadAhead<I> {
    io: I,
    /// Bytes read from the socket that TLS has not taken yet.
    ahead: BytesMut,
}

impl<I> ReadAhead<I> {
    pub fn new(io: I) -> ReadAhead<I> {
        ReadAhead {
            io,
            ahead: BytesMut::new(),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for ReadAhead<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.ahead.is_empty() {
            if out.remaining() >= CAPACITY {
                // As large a read as ours: no reason to copy it.
                return Pin::new(&mut this.io).poll_read(cx, out);
            }
            this.ahead.reserve(CAPACITY);
            let read = ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut this.io),
                cx,
                &mut this.ahead
            ));
            if let Err(e) = read {
                this.ahead = BytesMut::new();
                return Poll::Ready(Err(e));
            }
            // Zero bytes: end of stream, which an empty `out` reports.
        }
        let n = out.remaining().min(this.ahead.len());
        out.put_slice(&this.ahead[..n]);
        this.ahead.advance(n);
        if this.ahead.is_empty() {
            this.ahead = BytesMut::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for ReadAhead<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Counts the reads that reach the socket.
    struct Counted<I> {
        io: I,
        reads: usize,
    }

    impl<I: AsyncRead + Unpin> AsyncRead for Counted<I> {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            let before = buf.filled().len();
            let polled = Pin::new(&mut this.io).poll_read(cx, buf);
            if polled.is_ready() && buf.filled().len() > before {
                this.reads += 1;
            }
            polled
        }
    }

    /// What arrived at once is read from the socket once however small the reader's reads,
    /// every byte comes out in order, the buffer is let go when emptied, and the end of the
    /// stream is passed on.
    #[tokio::test]
    async fn small_reads_take_what_arrived_in_one_socket_read() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let sent: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&sent).await.unwrap();
        drop(client);
        let mut reader = ReadAhead::new(Counted {
            io: server,
            reads: 0,
        });
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = reader.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
            if got.len() == sent.len() {
                assert_eq!(reader.io.reads, 1, "10,000 bytes in one read ahead");
                assert_eq!(reader.ahead.capacity(), 0, "emptied: let go");
            }
        }
        assert_eq!(got, sent);
    }

    /// A read at least as large as the buffer goes to the socket directly.
    #[tokio::test]
    async fn large_reads_pass_through() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(&[7u8; 100]).await.unwrap();
        let mut reader = ReadAhead::new(server);
        let mut big = vec![0u8; CAPACITY];
        let n = reader.read(&mut big).await.unwrap();
        assert_eq!(&big[..n], &[7u8; 100][..]);
        assert_eq!(reader.ahead.capacity(), 0, "nothing was buffered");
    }
}
