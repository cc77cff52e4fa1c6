//! Where [`Connection::poll_transmit`](super::Connection::poll_transmit)
//! puts frames: a contiguous buffer (everything copied), or [`Segments`],
//! which keeps body chunks as the `Bytes` they were queued as, so a
//! pre-encoded resource shared by every connection of a core reaches the
//! socket (`sendmsg` with an iovec per piece) without a copy per connection.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, BufMut, Bytes, BytesMut};

thread_local! {
    static COPIED: Cell<u64> = const { Cell::new(0) };
}

/// Body bytes this thread has copied into output buffers so far (frame
/// heads and control frames are written, not copied, and not counted).
/// For benchmarks and tests: the number a push adds is what it cost in
/// copies.
pub fn copied_bytes() -> u64 {
    COPIED.with(Cell::get)
}

fn count_copy(n: usize) {
    COPIED.with(|c| c.set(c.get() + n as u64));
}

/// An output for frames.
pub trait Transmit {
    /// What frame heads and control frames are encoded into.
    type Buf: BufMut;
    /// Bytes put so far.
    fn written(&self) -> usize;
    /// The buffer to encode frame heads into.
    fn buf(&mut self) -> &mut Self::Buf;
    /// A frame's body bytes, in order after what [`Transmit::buf`] holds.
    fn body(&mut self, chunk: Bytes);
}

impl Transmit for Vec<u8> {
    type Buf = Vec<u8>;
    fn written(&self) -> usize {
        self.len()
    }
    fn buf(&mut self) -> &mut Vec<u8> {
        self
    }
    fn body(&mut self, chunk: Bytes) {
        count_copy(chunk.len());
        self.extend_from_slice(&chunk);
    }
}

/// Body chunks shorter than this are copied next to the frame heads
/// (prefixes, nonces and versions of a few bytes are cheaper copied than
/// given an iovec of their own); longer ones are referenced. Every
/// resource is longer: its `Any` alone names its type URL.
pub const COPY_BELOW: usize = 32;

/// Most pieces handed to one `sendmsg` (Linux's `UIO_MAXIOV` is 1,024).
pub const MAX_IOV: usize = 256;

/// Output as a queue of byte pieces: frame heads and small chunks gathered
/// in one buffer, large body chunks referenced where they are.
#[derive(Debug)]
pub struct Segments {
    head: BytesMut,
    /// `head` was split since it was last replaced: its capacity no longer
    /// says how large its allocation is.
    split: bool,
    parts: VecDeque<Bytes>,
    /// Bytes in `parts`.
    len: usize,
    copy_below: usize,
    /// The size of the next chunk `head` takes ([`FIRST_CHUNK`] doubling
    /// to [`MAX_CHUNK`] until the buffer is given back).
    chunk: usize,
}

/// The first chunk frame heads are gathered in. A push of one change
/// gathers a few dozen bytes (a DATA frame's head, gRPC's prefix, the
/// nonce): a chunk of 4 KiB per push to each of 1,000 proxies was 4 MB a
/// change, and with it eight of jemalloc's heap samples (one per 512 KiB
/// allocated, each a backtrace), 3% of a serving core.
const FIRST_CHUNK: usize = 512;
/// The largest chunk, where a push of many resources gathers their small
/// fields.
const MAX_CHUNK: usize = 4096;

impl Default for Segments {
    fn default() -> Self {
        Self::new(COPY_BELOW)
    }
}

impl Segments {
    /// Chunks shorter than `copy_below` are copied; `usize::MAX` copies
    /// everything (one contiguous buffer, for comparison).
    pub fn new(copy_below: usize) -> Self {
        Segments { head: BytesMut::new(), split: false, parts: VecDeque::new(), len: 0, copy_below, chunk: FIRST_CHUNK }
    }

    /// Nothing left to write.
    pub fn is_empty(&self) -> bool {
        self.len == 0 && self.head.is_empty()
    }

    /// Bytes left to write.
    pub fn len(&self) -> usize {
        self.len + self.head.len()
    }

    fn seal(&mut self) {
        if !self.head.is_empty() {
            self.split = true;
            let b = self.head.split().freeze();
            self.len += b.len();
            self.parts.push_back(b);
        }
    }

    /// Fills `out` with the next pieces to write (what is gathered is
    /// sealed first) and says how many; 0 when nothing is left.
    pub fn slices<'a>(&'a mut self, out: &mut [IoSlice<'a>]) -> usize {
        self.seal();
        let mut n = 0;
        for (slot, b) in out.iter_mut().zip(self.parts.iter()) {
            *slot = IoSlice::new(b);
            n += 1;
        }
        n
    }

    /// `n` bytes were written.
    pub fn advance(&mut self, mut n: usize) {
        self.seal();
        self.len -= n;
        while n > 0 {
            let front = self.parts.front_mut().expect("written bytes were queued");
            if front.len() > n {
                front.advance(n);
                return;
            }
            n -= front.len();
            self.parts.pop_front();
        }
    }

    /// Gives back memory an idle connection should not keep: the gathering
    /// buffer beyond `keep` bytes and the piece queue's slots.
    pub fn shrink(&mut self, keep: usize) {
        if self.is_empty() {
            if self.split || self.head.capacity() > keep {
                self.head = BytesMut::new();
                self.split = false;
                self.chunk = FIRST_CHUNK;
            }
            if self.parts.capacity() > 16 {
                self.parts = VecDeque::new();
            }
        }
    }
}

impl Transmit for Segments {
    type Buf = BytesMut;
    fn written(&self) -> usize {
        self.len()
    }
    fn buf(&mut self) -> &mut BytesMut {
        // Frame heads go into chunks of up to a few KiB (after a split the
        // rest of an allocation is shared with pieces in flight; a head of
        // 9 bytes must not cost an allocation of its own).
        if self.head.capacity() - self.head.len() < 64 {
            self.head.reserve(self.chunk);
            self.chunk = (self.chunk * 2).min(MAX_CHUNK);
        }
        &mut self.head
    }
    fn body(&mut self, chunk: Bytes) {
        if chunk.len() < self.copy_below {
            count_copy(chunk.len());
            self.head.extend_from_slice(&chunk);
        } else {
            self.seal();
            self.len += chunk.len();
            self.parts.push_back(chunk);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(s: &mut Segments, max: usize) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let mut iov = vec![IoSlice::new(&[]); max];
            let k = s.slices(&mut iov);
            if k == 0 {
                break;
            }
            // Write part of what is offered, as a socket may.
            let offered: usize = iov[..k].iter().map(|b| b.len()).sum();
            let n = offered.div_ceil(2).max(1);
            let mut left = n;
            for b in &iov[..k] {
                let take = left.min(b.len());
                out.extend_from_slice(&b[..take]);
                left -= take;
                if left == 0 {
                    break;
                }
            }
            s.advance(n);
        }
        out
    }

    #[test]
    fn pieces_come_out_in_order_and_large_ones_are_not_copied() {
        let shared = Bytes::from(vec![7u8; 1000]);
        let mut s = Segments::default();
        let before = copied_bytes();
        s.buf().put_slice(b"head");
        s.body(Bytes::from_static(b"tiny"));
        s.body(shared.clone());
        s.buf().put_slice(b"next");
        s.body(shared.slice(0..500));
        assert_eq!(copied_bytes() - before, 4, "only the 4-byte chunk is copied");
        assert_eq!(s.len(), 4 + 4 + 1000 + 4 + 500);
        // The large chunks are the shared allocation itself.
        let mut iov = [IoSlice::new(&[]); MAX_IOV];
        assert_eq!(s.slices(&mut iov), 4);
        assert_eq!(iov[1].as_ptr(), shared.as_ptr());
        let mut want = b"headtiny".to_vec();
        want.extend_from_slice(&shared);
        want.extend_from_slice(b"next");
        want.extend_from_slice(&shared[..500]);
        assert_eq!(drain(&mut s, 3), want);
        assert!(s.is_empty());
    }

    #[test]
    fn a_small_push_takes_a_small_chunk_and_a_large_one_larger() {
        let shared = Bytes::from(vec![7u8; 1000]);
        let mut s = Segments::default();
        // A change's push: a frame head, a prefix and a nonce around a
        // shared body.
        s.buf().put_slice(&[0; 14]);
        s.body(shared.clone());
        s.body(Bytes::from_static(b"nonce-1-2"));
        assert!(s.head.capacity() <= FIRST_CHUNK, "{} bytes for a small push", s.head.capacity());
        let pushed = drain(&mut s, MAX_IOV);
        assert_eq!(pushed.len(), 14 + 1000 + 9);
        // A push of many resources: the chunks grow, up to the largest.
        let mut chunks = Vec::new();
        for _ in 0..1000 {
            // What the gathering buffer holds (a chunk when it takes one).
            chunks.push(s.buf().capacity());
            s.buf().put_slice(&[1; 9]);
            s.body(shared.slice(0..100));
        }
        assert!(chunks.iter().all(|c| *c <= MAX_CHUNK), "no chunk over {MAX_CHUNK}");
        assert!(chunks.contains(&MAX_CHUNK), "the chunks grew to {MAX_CHUNK}: {:?}", &chunks[..20]);
        assert_eq!(drain(&mut s, MAX_IOV).len(), 1000 * 109);
        // Given back once idle: the next small push starts small again.
        s.shrink(1024);
        s.buf().put_slice(&[0; 14]);
        assert!(s.head.capacity() <= FIRST_CHUNK, "{} bytes after idle", s.head.capacity());
    }

    #[test]
    fn copy_everything_is_one_buffer() {
        let mut s = Segments::new(usize::MAX);
        let before = copied_bytes();
        s.buf().put_slice(b"h");
        s.body(Bytes::from(vec![1u8; 100]));
        assert_eq!(copied_bytes() - before, 100);
        let mut iov = [IoSlice::new(&[]); MAX_IOV];
        assert_eq!(s.slices(&mut iov), 1);
        assert_eq!(iov[0].len(), 101);
    }
}
