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
    /// A range of an [`Arena`], which it keeps alive.
    #[cfg(target_os = "linux")]
    Placed(linux::Placed<T>),
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
    /// pages when none are free).
    pub fn is_mapped(&self) -> bool {
        match &self.storage {
            Storage::Vec(_) => false,
            #[cfg(target_os = "linux")]
            Storage::Mapped(_) | Storage::Placed(_) => true,
        }
    }

    /// The index of the first value not wholly inside a huge page: 0 for a `Vec`, the start
    /// of the last partial huge page for a mapping of its own (kept in small pages), the end
    /// for a range of an [`Arena`] (whose pages are all huge). The x86 matmuls prefetch from
    /// there on.
    pub fn small_pages_from(&self) -> usize {
        match &self.storage {
            Storage::Vec(_) => 0,
            #[cfg(target_os = "linux")]
            Storage::Mapped(_) => {
                std::mem::size_of_val(&**self) / HUGE_PAGE * HUGE_PAGE
                    / std::mem::size_of::<T>().max(1)
            }
            #[cfg(target_os = "linux")]
            Storage::Placed(_) => self.len(),
        }
    }
}

/// Many buffers in one mapping of whole huge pages, end to end: the weights of a model once
/// loaded ([`crate::model::Weights`]). A buffer of its own keeps its last partial huge page
/// in small pages, which the stream prefetchers stop at; buffers under 2 MiB (every matrix of
/// SmolLM2's layers, of Gemma 3 270M's) are `Vec`s in small pages. Placed end to end, only
/// the arena's last page is partial, and it is rounded up (at most 2 MiB more for a whole
/// model). Measured on an AMD EPYC Zen 4, one thread, nine 16000 x 2048 Q4_0 matmuls (a 1.6 MB
/// tail each in small pages), alternated: 26.9 GB/s in mappings of their own, 29.5 in whole
/// huge pages.
pub struct Arena {
    #[cfg(target_os = "linux")]
    region: std::sync::Arc<linux::Mapping<u8>>,
    /// Bytes handed out.
    #[cfg(target_os = "linux")]
    used: usize,
}

impl Arena {
    /// Where each buffer starts: a cache line, so every tile keeps its alignment.
    const ALIGN: usize = 64;

    /// Room for buffers of `sizes` bytes (each placed at a multiple of 64 bytes), or `None`
    /// when they would not fill a huge page, huge pages are off, or the OS refuses the mapping.
    pub fn for_sizes(sizes: impl IntoIterator<Item = usize>) -> Option<Arena> {
        let total = sizes.into_iter().try_fold(0usize, |total, n| {
            total.checked_add(n.checked_next_multiple_of(Self::ALIGN)?)
        })?;
        #[cfg(target_os = "linux")]
        if wants_huge_pages(total) {
            let region = linux::Mapping::<u8>::zeroed(total.checked_next_multiple_of(HUGE_PAGE)?)?;
            return Some(Arena {
                region: std::sync::Arc::new(region),
                used: 0,
            });
        }
        let _ = total;
        None
    }

    /// `data` moved into the arena, or `data` itself when the arena has no room left for it.
    /// A buffer with a mapping of its own hands each huge page back to the OS as soon as it is
    /// copied, so moving a model's weights raises the peak resident memory by one huge page, not
    /// by the biggest matrix.
    pub fn take<T: Copy>(&mut self, data: Buf<T>) -> Buf<T> {
        #[cfg(target_os = "linux")]
        {
            let bytes = std::mem::size_of_val(&*data);
            let room = self.region.len().saturating_sub(self.used);
            if std::mem::align_of::<T>() > Self::ALIGN || bytes > room {
                return data;
            }
            let placed = linux::Placed::moved_from(&self.region, self.used, data);
            self.used = (self.used + bytes).next_multiple_of(Self::ALIGN);
            Buf {
                storage: Storage::Placed(placed),
            }
        }
        #[cfg(not(target_os = "linux"))]
        data
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
            #[cfg(target_os = "linux")]
            Storage::Placed(p) => p.as_slice(),
        }
    }
}

impl<T: Copy> DerefMut for Buf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.storage {
            Storage::Vec(v) => v,
            #[cfg(target_os = "linux")]
            Storage::Mapped(m) => m.as_mut_slice(),
            #[cfg(target_os = "linux")]
            Storage::Placed(p) => p.as_mut_slice(),
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
    use super::{Buf, Storage, HUGE_PAGE};
    use std::ptr::NonNull;
    use std::sync::Arc;

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

        /// `bytes` zero bytes (as the OS hands out anonymous memory) in a new mapping, or
        /// `None` when the OS refuses one.
        pub fn zeroed(bytes: usize) -> Option<Mapping<u8>> {
            Mapping::<u8>::map(bytes)
        }

        pub fn len(&self) -> usize {
            self.len
        }

        pub fn as_slice(&self) -> &[T] {
            // SAFETY: ptr holds len initialized values (written by `copy_of` or `filled`, or
            // the zeros of a new anonymous mapping for `zeroed`), valid while self lives.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }

        pub fn as_mut_slice(&mut self) -> &mut [T] {
            // SAFETY: as above, and &mut self makes this the only reference.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
        }
    }

    /// `len` values of `T` at `ptr`, inside a shared arena's mapping that no other `Placed`
    /// overlaps (Arena::place hands out each byte once); the arena lives while any does.
    pub struct Placed<T> {
        _region: Arc<Mapping<u8>>,
        ptr: NonNull<T>,
        len: usize,
    }

    // SAFETY: a Placed owns its range as a Vec owns its memory (no other Placed overlaps it and
    // the shared mapping is never read through the Arc), so it may move to and be shared
    // between threads exactly when its values may.
    unsafe impl<T: Send> Send for Placed<T> {}
    // SAFETY: as above; shared access only hands out `&[T]`.
    unsafe impl<T: Sync> Sync for Placed<T> {}

    impl<T: Copy> Placed<T> {
        /// `data` moved to byte `offset` of `region`: the caller (Arena::take) hands out each
        /// range once. A mapping of its own gives each huge page back once it is copied.
        pub fn moved_from(region: &Arc<Mapping<u8>>, offset: usize, data: Buf<T>) -> Placed<T> {
            let (len, bytes) = (data.len(), std::mem::size_of_val(&*data));
            assert!(
                offset + bytes <= region.len() && offset.is_multiple_of(std::mem::align_of::<T>()),
                "Placed::moved_from: range outside the arena or misaligned"
            );
            // SAFETY: offset is inside the mapping (asserted), which is alive while `region`
            // is.
            let to = unsafe { region.ptr.as_ptr().add(offset) };
            let from = data.as_ptr().cast::<u8>();
            // Whole huge pages of a mapping of its own go back to the OS as they are copied
            // (its start is 2 MiB-aligned); other buffers are simply dropped after.
            let give_back = matches!(data.storage, Storage::Mapped(_));
            let mut done = 0;
            while done < bytes {
                let n = (bytes - done).min(HUGE_PAGE);
                // SAFETY: [offset + done, + n) lies in the arena's mapping (asserted), nothing
                // else points into it (the range is handed out once), and it does not overlap
                // the source, which is another buffer; bytes of a Copy type copy as bytes. No
                // reference to the source is alive across the loop (only the raw `from`).
                unsafe { std::ptr::copy_nonoverlapping(from.add(done), to.add(done), n) };
                if give_back && n == HUGE_PAGE {
                    // SAFETY: a 2 MiB-aligned range inside the source mapping, which is never
                    // read again (`data` is dropped below without being read); MADV_DONTNEED
                    // only drops its pages.
                    unsafe {
                        libc::madvise(from.add(done) as *mut libc::c_void, n, libc::MADV_DONTNEED)
                    };
                }
                done += n;
            }
            drop(data);
            // A Vec was malloc's: freed, its pages may stay in the heap, resident beside their
            // copy (SmolLM2: peak 150 -> 214 MB), unless the heap is trimmed.
            #[cfg(target_env = "gnu")]
            if !give_back {
                // SAFETY: malloc_trim has no preconditions; it only returns free heap pages.
                unsafe { libc::malloc_trim(0) };
            }
            Placed {
                _region: Arc::clone(region),
                ptr: NonNull::new(to.cast::<T>()).expect("inside a mapping"),
                len,
            }
        }

        pub fn as_slice(&self) -> &[T] {
            // SAFETY: ptr holds len values written by `copy_of`, alive while `_region` is.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }

        pub fn as_mut_slice(&mut self) -> &mut [T] {
            // SAFETY: as above, and no other Placed overlaps the range, so &mut self makes this
            // the only reference.
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
    fn arena_for_3_mib_and_100_bytes_and_6_u16_keeps_each_in_place_in_huge_pages() {
        let big: Vec<u32> = (0..(3 << 20) / 4).collect();
        let small: Vec<u8> = (0..100).collect();
        let halves = [1u16, 2, 3, 4, 5, 0xffff];
        let sizes = [3 << 20, 100, 12];
        let Some(mut arena) = Arena::for_sizes(sizes) else {
            // No huge pages here (another OS, THP off, INFERNO_HUGE_PAGES=0).
            return;
        };
        let a = arena.take(Buf::from(big.clone()));
        let b = arena.take(Buf::from(small.clone()));
        let mut c = arena.take(Buf::from(halves.to_vec()));
        assert_eq!(&a[..], &big[..]);
        assert_eq!(&b[..], &small[..]);
        c[5] = 6;
        assert_eq!(&c[..], &[1, 2, 3, 4, 5, 6]);
        // End to end from a 2 MiB boundary, each at a cache line; every page a huge one.
        assert_eq!(a.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(b.as_ptr() as usize, a.as_ptr() as usize + (3 << 20));
        assert_eq!(c.as_ptr() as usize, b.as_ptr() as usize + 128);
        for (buf_len, from) in [
            (a.len(), a.small_pages_from()),
            (c.len(), c.small_pages_from()),
        ] {
            assert_eq!(from, buf_len);
        }
        // Full: what does not fit stays where it was; the arena outlives its owner.
        let d = arena.take(Buf::from(vec![7u8; 2 << 20]));
        let arena_at = a.as_ptr() as usize..a.as_ptr() as usize + (4 << 20);
        assert!(!arena_at.contains(&(d.as_ptr() as usize)) && d.iter().all(|&x| x == 7));
        drop(arena);
        assert_eq!(a[(3 << 20) / 4 - 1], (3 << 20) / 4 - 1);
    }

    #[test]
    fn arena_for_1_kib_is_none() {
        assert!(Arena::for_sizes([1024]).is_none());
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
