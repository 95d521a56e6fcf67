//! The heap allocator of the Switchyard binaries: mimalloc, called the way the C library's
//! `malloc` is called by Rust's own system allocator — the plain entry points for the
//! alignments every block has anyway, the aligned ones only beyond.
//!
//! The `mimalloc` crate calls `mi_malloc_aligned` for every allocation. That entry point takes
//! its fast path only for blocks up to 1 KiB whose free list happens to be aligned; every
//! larger block (a spawned task, a boxed future, a read buffer) went through its generic path,
//! which over-allocates by the alignment and aligns inside the block: ~10 such allocations per
//! forwarded call, ~210 instructions each (callgrind, README "Performance"). An allocation
//! whose alignment is at most a machine word needs none of that: mimalloc makes every block a
//! whole number of words, starting at a 16-byte aligned place in its page, so every block it
//! returns is word-aligned.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every mimalloc block has: blocks are whole words (`_mi_wsize_from_size`) laid
/// out from a page's first block, which is aligned to 16 bytes
/// (`MI_PAGE_MIN_START_BLOCK_ALIGN`); huge blocks are OS-page aligned. The tests check it
/// over every size class.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator (`#[global_allocator]`).
#[derive(Debug, Default, Clone, Copy)]
pub struct MiMalloc;

// SAFETY: every method hands mimalloc a layout's size (and alignment, where it is larger than
// a word) as its C functions document; blocks come from and go back to mimalloc only, and
// `mi_free`/`mi_realloc` accept blocks from any of its allocation functions, aligned or not.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = if layout.align() <= WORD {
            // SAFETY: any size; the block is word-aligned (see `WORD`), which is enough.
            unsafe { mi::mi_malloc(layout.size()) }
        } else {
            // SAFETY: the alignment is a power of two (a `Layout`'s always is).
            unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()) }
        };
        p.cast()
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = if layout.align() <= WORD {
            // SAFETY: as in `alloc`.
            unsafe { mi::mi_zalloc(layout.size()) }
        } else {
            // SAFETY: as in `alloc`.
            unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()) }
        };
        p.cast()
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller passes a block this allocator returned (from mimalloc).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = if layout.align() <= WORD {
            // SAFETY: `ptr` is a mimalloc block (the caller's contract); the new block is
            // word-aligned like any other.
            unsafe { mi::mi_realloc(ptr.cast::<c_void>(), new_size) }
        } else {
            // SAFETY: as above, keeping the block's alignment.
            unsafe { mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()) }
        };
        p.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes across every small and medium size class and into the large and huge ones.
    fn sizes() -> impl Iterator<Item = usize> {
        (1..=4096).chain((4097..=1 << 20).step_by(509)).chain([
            (1 << 20) + 1,
            3 << 20,
            (32 << 20) + 7,
            70 << 20,
        ])
    }

    const ALIGNS: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 4096];

    #[test]
    fn blocks_have_their_layouts_alignment_and_keep_their_bytes_through_realloc() {
        let a = MiMalloc;
        for align in ALIGNS {
            for size in sizes().filter(|s| align <= 64 || s % 7 == 0) {
                let layout = Layout::from_size_align(size, align).expect("layout");
                // SAFETY: a non-zero size; the block is written within its size and freed
                // with its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null(), "size {size} align {align}");
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    assert_eq!(p as usize % WORD, 0, "size {size}: not word-aligned");
                    p.write(0xa5);
                    p.add(size - 1).write(0x5a);
                    let grown = size * 2 + 3;
                    let q = a.realloc(p, layout, grown);
                    assert!(!q.is_null());
                    assert_eq!(q as usize % align, 0, "realloc: size {size} align {align}");
                    // (With one byte, the last is the first.)
                    let first = if size == 1 { 0x5a } else { 0xa5 };
                    assert_eq!((q.read(), q.add(size - 1).read()), (first, 0x5a));
                    let r = a.realloc(q, Layout::from_size_align(grown, align).expect("l"), 1);
                    assert_eq!(r as usize % align, 0);
                    assert_eq!(r.read(), first);
                    a.dealloc(r, Layout::from_size_align(1, align).expect("layout"));
                }
            }
        }
    }

    #[test]
    fn zeroed_blocks_are_zero_even_where_a_freed_block_was_written() {
        let a = MiMalloc;
        for align in ALIGNS {
            for size in sizes().step_by(97) {
                let layout = Layout::from_size_align(size, align).expect("layout");
                // SAFETY: as above; the first block is dirtied and freed so the second may
                // reuse it.
                unsafe {
                    let dirty = a.alloc(layout);
                    dirty.write_bytes(0xff, size);
                    a.dealloc(dirty, layout);
                    let p = a.alloc_zeroed(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0);
                    let bytes = std::slice::from_raw_parts(p, size);
                    assert!(bytes.iter().all(|&b| b == 0), "size {size} align {align}");
                    a.dealloc(p, layout);
                }
            }
        }
    }
}
