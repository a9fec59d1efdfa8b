//! The provided-buffer ring of one worker: receive buffers the kernel picks from as data
//! arrives, so a receive armed on an idle connection holds no memory.
//!
//! The buffers are ordinary pool buffers (`Vec<u8>` of [`BUFFER_SIZE`] or more), so a
//! buffer that just received a request can become the connection's input as it is, and
//! the ring gets an empty pool buffer in its place.

use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

use crate::buffers::{BufferPool, BUFFER_SIZE};

/// A registered ring of receive buffers, indexed by buffer id.
pub(super) struct BufRing {
    /// The ring entries, in memory of our own (page-aligned, as the kernel requires).
    entries: *mut BufRingEntry,
    map_len: usize,
    mask: u16,
    /// Our copy of the tail the kernel reads; entries before it are the kernel's to take.
    tail: u16,
    /// The buffer behind each id; an empty `Vec` while the buffer is out of the ring.
    bufs: Vec<Vec<u8>>,
    group: u16,
    /// Set once no operation can touch the buffers any more: only then is their memory freed.
    retired: bool,
}

impl BufRing {
    /// Registers a ring of `count` buffers (a power of two) as buffer group `group`, filled
    /// from `pool`.
    pub(super) fn new(
        ring: &IoUring,
        group: u16,
        count: u16,
        pool: &mut BufferPool,
    ) -> io::Result<BufRing> {
        assert!(
            count.is_power_of_two(),
            "buffer ring size must be a power of two"
        );
        let page = 4096;
        let map_len = (count as usize * std::mem::size_of::<BufRingEntry>()).next_multiple_of(page);
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let addr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut this = BufRing {
            entries: addr.cast(),
            map_len,
            mask: count - 1,
            tail: 0,
            bufs: (0..count).map(|_| Vec::new()).collect(),
            group,
            // Nothing is registered yet, so nothing can reach the memory.
            retired: true,
        };
        // SAFETY: the mapping is ours, page-aligned, sized for `count` entries and lives until
        // `self` is dropped, which unmaps it only after the ring is unregistered (`retire`).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(addr as u64, count, group, 0)
        }
        .map_err(|e| io::Error::new(e.kind(), format!("cannot register a buffer ring: {e}")))?;
        this.retired = false;
        for bid in 0..count {
            this.provide(bid, pool.take());
        }
        Ok(this)
    }

    /// The buffer group id to name in receives.
    pub(super) fn group(&self) -> u16 {
        self.group
    }

    /// Takes buffer `bid` out of the ring, holding the `len` bytes the kernel reported; `None`
    /// for an id or length the ring cannot have produced.
    pub(super) fn take(&mut self, bid: u16, len: usize) -> Option<Vec<u8>> {
        let buf = self.bufs.get_mut(bid as usize)?;
        if buf.capacity() == 0 || len > BUFFER_SIZE {
            return None;
        }
        let mut buf = std::mem::take(buf);
        // SAFETY: the kernel wrote `len` bytes at the start of this buffer (its completion
        // says so), and `len` is within the `BUFFER_SIZE` bytes the ring entry offered.
        unsafe { buf.set_len(len) };
        Some(buf)
    }

    /// Puts `buf` back into the ring as buffer `bid`, for the kernel to fill.
    pub(super) fn provide(&mut self, bid: u16, mut buf: Vec<u8>) {
        if buf.capacity() < BUFFER_SIZE {
            buf = Vec::with_capacity(BUFFER_SIZE);
        }
        buf.clear();
        let slot = (self.tail & self.mask) as usize;
        // SAFETY: `slot` is within the mapping; the kernel only reads entries before the tail,
        // and this one is past it until the store below.
        unsafe {
            let entry = &mut *self.entries.add(slot);
            entry.set_addr(buf.as_mut_ptr() as u64);
            entry.set_len(BUFFER_SIZE as u32);
            entry.set_bid(bid);
        }
        self.bufs[bid as usize] = buf;
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field shares the first entry's reserved word; the kernel reads it
        // concurrently, hence the atomic release store after the entry is written.
        unsafe {
            let tail = BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    /// Unregisters the ring once no operation can use it any more, which lets its memory be
    /// freed on drop.
    pub(super) fn retire(&mut self, ring: &IoUring) {
        if !self.retired && ring.submitter().unregister_buf_ring(self.group).is_ok() {
            self.retired = true;
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if !self.retired {
            // An operation may still write into these buffers: leaking them is the safe choice
            // (this happens only when a worker fails or cannot wait for its operations).
            std::mem::forget(std::mem::take(&mut self.bufs));
            return;
        }
        // SAFETY: the mapping came from mmap with this length and nothing refers to it now.
        unsafe {
            libc::munmap(self.entries.cast(), self.map_len);
        }
    }
}
