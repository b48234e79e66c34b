//! Where the weights live: [`Buf`], a slice that every decoded token reads from end to end, in
//! 2 MiB pages on Linux (a decode streams every weight once: in 4 KiB pages that walk needs a
//! TLB entry every 4 KiB and the stream prefetchers stop at every page boundary).

use std::fmt;
use std::ops::{Deref, DerefMut};

/// The size of an x86-64 (and most aarch64) Linux transparent huge page.
pub const HUGE_PAGE: usize = 2 << 20;

/// An immutable-length slice of `T`, in huge pages where the OS offers them.
///
/// Most Linux systems ship transparent huge pages in `madvise` mode, so nothing happens unless
/// asked: on Linux a buffer of at least one huge page gets an anonymous mapping of its own,
/// aligned to 2 MiB and marked `MADV_HUGEPAGE` before its first write (pages are then faulted in
/// 2 MiB at a time, with no later copying); its last partial huge page stays in small pages, so
/// no buffer grows by more than a page. Smaller buffers, every buffer on other targets (the
/// browser), and every buffer when `INFERNO_HUGE_PAGES=0` is set or the system's THP mode is
/// `never` are plain `Vec`s. Contents, and so every result, are the same either way;
/// [`huge_page_bytes`] tells how much the OS really gave. Measured on an AMD EPYC Zen 4
/// (TinyLlama-shape Q4_0, 1 thread, alternated runs): decode 28.9 / 29.0 tok/s in 4 KiB pages,
/// 34.3 / 35.2 in 2 MiB pages.
pub struct Buf<T: Copy> {
    storage: Storage<T>,
}

enum Storage<T: Copy> {
    Vec(Vec<T>),
    #[cfg(target_os = "linux")]
    Mapped(linux::Mapping<T>),
}

impl<T: Copy> Buf<T> {
    /// A copy of `data`, in huge pages when it is big enough (see the module).
    pub fn from_slice(data: &[T]) -> Buf<T> {
        #[cfg(target_os = "linux")]
        if wants_huge_pages(std::mem::size_of_val(data)) {
            if let Some(mapping) = linux::Mapping::copy_of(data) {
                return Buf {
                    storage: Storage::Mapped(mapping),
                };
            }
        }
        Buf {
            storage: Storage::Vec(data.to_vec()),
        }
    }

    /// `len` copies of `value`, like `vec![value; len]` (which it is when not mapped): written
    /// in place, so a buffer that is then filled never sits in memory twice.
    pub fn filled(value: T, len: usize) -> Buf<T> {
        #[cfg(target_os = "linux")]
        if wants_huge_pages(len.saturating_mul(std::mem::size_of::<T>())) {
            if let Some(mapping) = linux::Mapping::filled(value, len) {
                return Buf {
                    storage: Storage::Mapped(mapping),
                };
            }
        }
        Buf {
            storage: Storage::Vec(vec![value; len]),
        }
    }

    /// Like [`Buf::filled`], but `None` when there is no memory for it.
    pub fn try_filled(value: T, len: usize) -> Option<Buf<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        #[cfg(target_os = "linux")]
        if wants_huge_pages(bytes) {
            if let Some(mapping) = linux::Mapping::filled(value, len) {
                return Some(Buf {
                    storage: Storage::Mapped(mapping),
                });
            }
        }
        let _ = bytes;
        let mut v = Vec::new();
        v.try_reserve_exact(len).ok()?;
        v.resize(len, value);
        Some(Buf {
            storage: Storage::Vec(v),
        })
    }

    /// Whether this buffer has its own huge-page mapping (the OS may still back it with small
    /// pages when none are free). The x86 matmuls prefetch only tiles that are not.
    pub fn is_mapped(&self) -> bool {
        match &self.storage {
            Storage::Vec(_) => false,
            #[cfg(target_os = "linux")]
            Storage::Mapped(_) => true,
        }
    }
}

/// Buffers of at least one huge page, unless `INFERNO_HUGE_PAGES=0` or transparent huge pages
/// are off system-wide (both read once).
#[cfg(target_os = "linux")]
fn wants_huge_pages(bytes: usize) -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    bytes >= HUGE_PAGE
        && *ENABLED.get_or_init(|| {
            // Where the kernel never gives huge pages, a mapping of our own buys nothing, and
            // the kernels would skip the prefetches that small pages need.
            let never = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .is_ok_and(|mode| mode.contains("[never]"));
            !never && std::env::var("INFERNO_HUGE_PAGES").as_deref() != Ok("0")
        })
}

impl<T: Copy> From<Vec<T>> for Buf<T> {
    /// Keeps the `Vec` when it stays a `Vec`; otherwise copies it into its mapping and frees it.
    fn from(data: Vec<T>) -> Buf<T> {
        #[cfg(target_os = "linux")]
        if wants_huge_pages(std::mem::size_of_val(&data[..])) {
            if let Some(mapping) = linux::Mapping::copy_of(&data) {
                return Buf {
                    storage: Storage::Mapped(mapping),
                };
            }
        }
        Buf {
            storage: Storage::Vec(data),
        }
    }
}

impl<T: Copy> FromIterator<T> for Buf<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Buf<T> {
        Buf::from(values.into_iter().collect::<Vec<T>>())
    }
}

impl<T: Copy> Deref for Buf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.storage {
            Storage::Vec(v) => v,
            #[cfg(target_os = "linux")]
            Storage::Mapped(m) => m.as_slice(),
        }
    }
}

impl<T: Copy> DerefMut for Buf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.storage {
            Storage::Vec(v) => v,
            #[cfg(target_os = "linux")]
            Storage::Mapped(m) => m.as_mut_slice(),
        }
    }
}

impl<T: Copy> Clone for Buf<T> {
    fn clone(&self) -> Buf<T> {
        Buf::from_slice(self)
    }
}

impl<T: Copy + fmt::Debug> fmt::Debug for Buf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Bytes of this process's anonymous memory that the OS backs with huge pages right now
/// (`AnonHugePages` of /proc/self/smaps_rollup); `None` where that is not known.
pub fn huge_page_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = text.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod linux {
    use super::HUGE_PAGE;
    use std::ptr::NonNull;

    /// `len` values of `T` at the start of an anonymous mapping of `map_bytes` bytes, aligned to
    /// [`HUGE_PAGE`] and marked `MADV_HUGEPAGE`. Owned: unmapped on drop.
    pub struct Mapping<T> {
        ptr: NonNull<T>,
        len: usize,
        map_bytes: usize,
    }

    // SAFETY: a Mapping owns its memory as a Vec does (no other pointer to it exists), so it may
    // move to and be shared between threads exactly when its values may.
    unsafe impl<T: Send> Send for Mapping<T> {}
    // SAFETY: as above; shared access only hands out `&[T]`.
    unsafe impl<T: Sync> Sync for Mapping<T> {}

    impl<T: Copy> Mapping<T> {
        /// A copy of `data` in a new mapping, or `None` when the OS refuses one (the caller
        /// keeps a `Vec` then).
        pub fn copy_of(data: &[T]) -> Option<Mapping<T>> {
            let mapping = Mapping::<T>::map(data.len())?;
            // SAFETY: the mapping holds room for data.len() values, suitably aligned (`map`),
            // and does not overlap `data`.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), mapping.ptr.as_ptr(), data.len());
            }
            Some(mapping)
        }

        /// `len` copies of `value` in a new mapping, or `None` when the OS refuses one.
        pub fn filled(value: T, len: usize) -> Option<Mapping<T>> {
            let mapping = Mapping::<T>::map(len)?;
            for i in 0..len {
                // SAFETY: i < len, inside the room `map` made for len values.
                unsafe { mapping.ptr.as_ptr().add(i).write(value) };
            }
            Some(mapping)
        }

        /// A mapping with room for `len` values, not yet written (so its pages are not yet
        /// faulted in: the first write brings each in as a huge page).
        fn map(len: usize) -> Option<Mapping<T>> {
            // SAFETY: sysconf has no preconditions.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
            if page == 0 || !HUGE_PAGE.is_multiple_of(page) || std::mem::align_of::<T>() > page {
                return None;
            }
            let map_bytes = len
                .checked_mul(std::mem::size_of::<T>())?
                .max(1)
                .checked_next_multiple_of(page)?;
            // One huge page more than needed, so that an aligned start lies inside; the
            // unaligned head and the tail are unmapped again.
            let span = map_bytes.checked_add(HUGE_PAGE)?;
            // SAFETY: a new private anonymous mapping at an address of the kernel's choosing
            // touches no existing memory.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    span,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if raw == libc::MAP_FAILED {
                return None;
            }
            let start = raw as usize;
            let aligned = start.next_multiple_of(HUGE_PAGE);
            let head = aligned - start;
            let tail = span - head - map_bytes;
            // SAFETY: both ranges lie inside the mapping just made, are page-aligned (mmap
            // returns page-aligned addresses, and head, map_bytes and HUGE_PAGE are multiples of
            // the page), and nothing points into them.
            unsafe {
                if head > 0 {
                    libc::munmap(raw, head);
                }
                if tail > 0 {
                    libc::munmap((aligned + map_bytes) as *mut libc::c_void, tail);
                }
            }
            let ptr = NonNull::new(aligned as *mut T)?;
            let mapping = Mapping {
                ptr,
                len,
                map_bytes,
            };
            // SAFETY: the range is exactly the mapping kept above; the advice changes no contents.
            let advised =
                unsafe { libc::madvise(ptr.as_ptr().cast(), map_bytes, libc::MADV_HUGEPAGE) };
            // Refused (THP compiled out): small pages after all, so a `Vec`, which the kernels
            // prefetch (dropping `mapping` unmaps it).
            (advised == 0).then_some(mapping)
        }

        pub fn as_slice(&self) -> &[T] {
            // SAFETY: ptr holds len initialized values (written by `copy_of` or `filled`), valid
            // while self lives.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }

        pub fn as_mut_slice(&mut self) -> &mut [T] {
            // SAFETY: as above, and &mut self makes this the only reference.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
        }
    }

    impl<T> Drop for Mapping<T> {
        fn drop(&mut self) {
            // SAFETY: exactly the range `map` kept, and no reference outlives self.
            unsafe {
                libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.map_bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buf_of_3_values_is_a_vec_and_keeps_them() {
        let b = Buf::from(vec![1u16, 2, 3]);
        assert!(!b.is_mapped());
        assert_eq!(&b[..], &[1, 2, 3]);
        assert_eq!(&b.clone()[..], &[1, 2, 3]);
    }

    #[test]
    fn try_filled_3_mib_of_7u64_holds_7_everywhere() {
        let b = Buf::try_filled(7u64, (3 << 20) / 8).expect("3 MiB");
        assert_eq!(b.len(), (3 << 20) / 8);
        assert!(b.iter().all(|&x| x == 7));
        assert!(Buf::try_filled(0u8, usize::MAX).is_none());
    }

    #[test]
    fn buf_of_0_values_is_empty() {
        let b: Buf<f32> = Buf::from(Vec::new());
        assert!(b.is_empty());
    }

    #[test]
    fn buf_of_5_mib_plus_3_f32_keeps_every_value_aligned_to_2_mib_on_linux() {
        let n = (5 << 20) / 4 + 3;
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let mut b = Buf::from(data.clone());
        assert_eq!(b.len(), n);
        assert!(b.iter().zip(&data).all(|(x, y)| x.to_bits() == y.to_bits()));
        b[n - 1] = -1.0;
        let c = b.clone();
        assert_eq!(c[n - 1], -1.0);
        assert_eq!(c[..n - 1], data[..n - 1]);
        #[cfg(target_os = "linux")]
        if wants_huge_pages(HUGE_PAGE) {
            assert!(b.is_mapped() && c.is_mapped());
            assert_eq!(b.as_ptr() as usize % HUGE_PAGE, 0);
            assert_eq!(c.as_ptr() as usize % HUGE_PAGE, 0);
        }
    }
}
