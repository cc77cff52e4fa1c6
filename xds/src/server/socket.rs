//! A plaintext TCP connection whose vectored write is one `sendmsg`:
//! glommio's stream writes only the first slice of a vectored write, and a
//! push made of a frame head and shared resource pieces would then cost a
//! system call per piece (or a copy of every piece into one buffer, which
//! is what [`Segments`](crate::h2::Segments) avoids).

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};
use glommio::net::TcpStream;
use nix::sys::socket::{MsgFlags, SockaddrStorage, sendmsg};

/// A plaintext stream with vectored writes.
#[derive(Debug)]
pub(super) struct Plain(pub(super) TcpStream);

impl AsyncRead for Plain {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Plain {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            // As glommio writes: try the call first, wait for the socket
            // only when it is full.
            let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
            match sendmsg::<SockaddrStorage>(self.0.as_raw_fd(), bufs, &[], flags, None) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(e) => return Poll::Ready(Err(io::Error::from(e))),
            }
        }
        // Full: glommio's write registers for writability (or writes the
        // first piece, if room appeared since).
        let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]);
        Pin::new(&mut self.0).poll_write(cx, first)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_close(cx)
    }
}
