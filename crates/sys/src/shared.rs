//! Memory shared with the processes forked after it is made: an anonymous shared mapping of
//! values made of atomics, such as the counters and scoreboards every process of a
//! pre-forked server reads and writes; or one in a memory file, which a process started
//! later (a reloaded server) can map too.

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::ops::Deref;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{
    AtomicBool, AtomicI16, AtomicI32, AtomicI64, AtomicI8, AtomicIsize, AtomicU16, AtomicU32,
    AtomicU64, AtomicU8, AtomicUsize,
};

/// A type that can live in a [`SharedMapping`]: its values start as zeroed memory and are
/// read and written at once by several threads and processes, through shared references.
///
/// # Safety
///
/// An implementing type must:
/// - be valid with every byte zero (the mapping starts so);
/// - change only through atomics: the processes sharing it synchronise with nothing else,
///   and a lock or a plain field written behind `&self` would be a data race;
/// - hold no pointers or references: the other processes see the same bytes, not the same
///   heap;
/// - need no drop: the values are never dropped, only unmapped;
/// - be aligned to no more than 4096 bytes, the smallest page (checked when mapping).
///
/// Implemented here for the atomic integers and arrays of such types; a `#[repr(C)]` struct of
/// them may implement it too.
pub unsafe trait ProcessShared: Sync {}

macro_rules! process_shared {
    ($($atomic: ty),*) => {
        // SAFETY: zero is a valid value of each, changed only atomically; no pointers, no drop.
        $(unsafe impl ProcessShared for $atomic {})*
    };
}
process_shared!(
    AtomicBool,
    AtomicU8,
    AtomicI8,
    AtomicU16,
    AtomicI16,
    AtomicU32,
    AtomicI32,
    AtomicU64,
    AtomicI64,
    AtomicUsize,
    AtomicIsize
);

// SAFETY: an array has its element's properties, element by element.
unsafe impl<T: ProcessShared, const N: usize> ProcessShared for [T; N] {}

/// `len` values of `T` in anonymous memory mapped shared (`mmap(MAP_SHARED |
/// MAP_ANONYMOUS)`): the processes forked after it is made see the same memory, so what one
/// of them stores the others load. Starts zeroed; unmapped when dropped (in each process its
/// own copy of the mapping), unless [`leaked`](SharedMapping::leak). Derefs to `[T]`.
///
/// It is `Send` and `Sync`: the mapping belongs to this value alone and is unmapped once, and
/// its contents are only ever reached through `&T`, which [`ProcessShared`]'s `Sync` makes
/// sound from any thread (and its atomics from any process); there is no `T` to drop on
/// whichever thread drops the mapping.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// let counters = fastpath_sys::SharedMapping::<AtomicU64>::new(4)?;
/// // Seen by this process and every process it forks from now on.
/// counters[2].fetch_add(1, Ordering::Relaxed);
/// assert_eq!(counters[2].load(Ordering::Relaxed), 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct SharedMapping<T: ProcessShared> {
    base: NonNull<T>,
    len: usize,
}

// SAFETY: see the type's documentation: shared access to `T: Sync` only, unmapped once.
unsafe impl<T: ProcessShared> Send for SharedMapping<T> {}
// SAFETY: as above.
unsafe impl<T: ProcessShared> Sync for SharedMapping<T> {}

impl<T: ProcessShared> SharedMapping<T> {
    /// Maps `len` zeroed values. Call it before forking the processes that are to share it.
    /// No memory is mapped for none (or for a type of size zero).
    pub fn new(len: usize) -> io::Result<Self> {
        const { assert!(std::mem::align_of::<T>() <= 4096, "aligned beyond a page") };
        let bytes = Self::bytes(len)?;
        if bytes == 0 {
            return Ok(SharedMapping {
                base: NonNull::dangling(),
                len,
            });
        }
        // SAFETY: the kernel zeroes anonymous memory, a valid T (ProcessShared).
        unsafe { Self::map_shared(len, bytes, libc::MAP_ANONYMOUS, -1) }
    }

    /// Maps `len` zeroed values in a memory file (`memfd_create`), returned with the mapping:
    /// besides the processes forked after it, a process this one starts may map the same
    /// memory from the file ([`SharedMapping::map_file`]), as a reloaded server does.
    pub fn new_in_file(len: usize, name: &CStr) -> io::Result<(Self, OwnedFd)> {
        let bytes = Self::bytes(len)?;
        // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
        let fd = crate::syscall!(memfd_create(name.as_ptr(), libc::MFD_CLOEXEC))?;
        // SAFETY: memfd_create just returned this descriptor, owned by no one else.
        let file = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = libc::off_t::try_from(bytes)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "shared mapping too large"))?;
        // SAFETY: sizes a file we own; a memory file reads as zeroes up to its size.
        crate::syscall!(ftruncate(file.as_raw_fd(), size))?;
        // SAFETY: the file is new and zeroed, a valid T throughout (ProcessShared).
        let mapping = unsafe { Self::map_file(&file, len)? };
        Ok((mapping, file))
    }

    /// Maps the `len` values held in `file`, which must be exactly that long.
    ///
    /// # Safety
    ///
    /// The file must hold valid values of `T`: made by [`SharedMapping::new_in_file`] for the
    /// same `T` (the same build, or a type laid out the same), and written only through such
    /// mappings. Any other process mapping it shares the values from then on.
    pub unsafe fn map_file(file: &OwnedFd, len: usize) -> io::Result<Self> {
        const { assert!(std::mem::align_of::<T>() <= 4096, "aligned beyond a page") };
        let bytes = Self::bytes(len)?;
        // SAFETY: fstat into a zeroed stat buffer.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        crate::syscall!(fstat(file.as_raw_fd(), &mut stat))?;
        if usize::try_from(stat.st_size).ok() != Some(bytes) || bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a shared file of {} bytes where {bytes} are expected",
                    stat.st_size
                ),
            ));
        }
        // SAFETY: valid values by the caller's word; the file is `bytes` long (checked).
        unsafe { Self::map_shared(len, bytes, 0, file.as_raw_fd()) }
    }

    /// `mmap(MAP_SHARED | extra)` of `bytes` (not zero) read and write, of `fd` or anonymous.
    ///
    /// # Safety
    ///
    /// The memory mapped holds `len` valid values of `T`, `bytes` of them.
    unsafe fn map_shared(
        len: usize,
        bytes: usize,
        extra: libc::c_int,
        fd: RawFd,
    ) -> io::Result<Self> {
        // SAFETY: a new mapping, placed by the kernel where nothing else is; the result is
        // checked for failure below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | extra,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // On a page boundary, which is aligned for T (checked by the callers).
        let base = NonNull::new(base.cast::<T>()).expect("mmap gives no null mapping");
        Ok(SharedMapping { base, len })
    }

    fn bytes(len: usize) -> io::Result<usize> {
        len.checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "shared mapping too large"))
    }

    /// The values, as a slice.
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `len` initialised (zeroed) values of T at an aligned, non-null base (or
        // dangling for no bytes), mapped as long as self.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }

    /// Keeps the mapping for the rest of the process, for values that live as long: the
    /// slice is `'static`.
    pub fn leak(self) -> &'static [T] {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: never unmapped now, so the values live as long as the process.
        unsafe { std::slice::from_raw_parts(this.base.as_ptr(), this.len) }
    }
}

impl<T: ProcessShared> Deref for SharedMapping<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: ProcessShared> Drop for SharedMapping<T> {
    fn drop(&mut self) {
        let bytes = Self::bytes(self.len).expect("checked when mapped");
        if bytes == 0 {
            return;
        }
        // SAFETY: the mapping made in new(), of that length, unmapped once; no reference to
        // its values outlives self.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), bytes);
        }
    }
}

impl<T: ProcessShared> fmt::Debug for SharedMapping<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedMapping")
            .field("type", &std::any::type_name::<T>())
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscall;
    use std::sync::atomic::Ordering::SeqCst;

    /// A block of counters, as the server's metrics keep one per worker.
    #[repr(C, align(64))]
    struct Block {
        hits: AtomicU64,
        by_class: [AtomicU32; 5],
        up: AtomicBool,
    }

    // SAFETY: atomics and an array of them, zero valid for each.
    unsafe impl ProcessShared for Block {}

    #[test]
    fn starts_zeroed_and_aligned() {
        let blocks = SharedMapping::<Block>::new(3).unwrap();
        assert_eq!(blocks.len(), 3);
        for block in blocks.iter() {
            assert_eq!(block as *const Block as usize % 64, 0);
            assert_eq!(block.hits.load(SeqCst), 0);
            assert!(block.by_class.iter().all(|c| c.load(SeqCst) == 0));
            assert!(!block.up.load(SeqCst));
        }
        blocks[2].by_class[4].store(9, SeqCst);
        assert_eq!(blocks[2].by_class[4].load(SeqCst), 9);
        assert_eq!(blocks[1].by_class[4].load(SeqCst), 0);
    }

    #[test]
    fn none_maps_nothing() {
        let none = SharedMapping::<AtomicU64>::new(0).unwrap();
        assert!(none.is_empty());
        assert!(none.leak().is_empty());
        let err = SharedMapping::<AtomicU64>::new(usize::MAX).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_leaked_mapping_stays() {
        let counters: &'static [AtomicU64] = SharedMapping::new(2).unwrap().leak();
        counters[1].fetch_add(3, SeqCst);
        let seen = std::thread::spawn(|| counters[1].load(SeqCst))
            .join()
            .unwrap();
        assert_eq!(seen, 3);
    }

    #[test]
    fn a_second_mapping_of_the_file_sees_the_same_values() {
        let (first, file) = SharedMapping::<AtomicU64>::new_in_file(2, c"test-shared").unwrap();
        first[1].store(42, SeqCst);
        // SAFETY: the file was made for two AtomicU64 just above.
        let second = unsafe { SharedMapping::<AtomicU64>::map_file(&file, 2) }.unwrap();
        assert_eq!(second[1].load(SeqCst), 42);
        second[0].fetch_add(3, SeqCst);
        drop(second);
        assert_eq!(first[0].load(SeqCst), 3);
        // SAFETY: as above; the length is wrong on purpose, and refused before mapping.
        let err = unsafe { SharedMapping::<AtomicU64>::map_file(&file, 3) }.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_forked_child_and_its_parent_see_the_same_values() {
        let counters = SharedMapping::<AtomicU64>::new(3).unwrap();
        counters[0].store(7, SeqCst);
        // SAFETY: the child, a copy of a multi-threaded test process, only loads and stores
        // atomics in the mapping and leaves with _exit: no allocation, no lock another thread
        // may have held at the fork, no unwinding.
        let pid = syscall!(fork()).unwrap();
        if pid == 0 {
            let seen = counters[0].load(SeqCst);
            counters[1].store(seen + 1, SeqCst);
            counters[2].fetch_add(5, SeqCst);
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child, writing its status into an int.
        syscall!(waitpid(pid, &mut status, 0)).unwrap();
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(counters[1].load(SeqCst), 8);
        assert_eq!(counters[2].load(SeqCst), 5);
    }
}
