//! Long-lived small allocations kept apart from the short-lived ones.
//!
//! Every event allocates a lot for a moment (the body's JSON, its conversions to Python),
//! while an index keeps a few small values of each object for as long as the object lives,
//! and a daemon or timer its object's body and its own records. From one heap, those values
//! land scattered among the moment's allocations; once those are freed, nearly every page
//! still holds a value or two, and none of the freed memory can go back to the system
//! (indexed pods kept three times their values' size in such pages: docs/benchmarks.md,
//! "Figures behind the code").
//! Allocated `apart`, the values pack densely in a region of their own.
//!
//! The region is one reservation of address space, used from its start as needed (only
//! pages written to take memory), in slots of sizes in steps of 16 bytes, or of 128 bytes
//! for values aligned to a cache line (a tokio task: a daemon's or timer's lives as long as
//! it does); a freed slot is reused for the next value of its size. Anything bigger than a
//! page, aligned more than a cache line, or allocated outside `apart`, is the general
//! allocator's: the system's, or the one the top crate gives (`Allocator(A)`).
//!
//! A crate of its own, the lowest of the workspace: it uses only `std` and `libc`, and the
//! top crate (`src/lib.rs`) installs it as the process's allocator. Its unsafe code is tested
//! natively and under Miri (`checks/run`: `cargo miri test -p kopf-rs-region`, with strict
//! provenance), including many threads allocating and freeing at once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering};

/// Slot sizes are multiples of this (and so is their alignment).
const GRAIN: usize = 16;
/// The slots of values aligned more than `GRAIN`: multiples of this, aligned to it (a
/// cache line, as tokio pads its tasks' headers).
const LINE: usize = 128;
/// Bigger allocations are the general allocator's: tables and buffers are few and freed whole (an
/// object's body, usually smaller, is kept apart by daemons).
const LARGEST: usize = 4096;
/// The slot sizes: first those in steps of `GRAIN`, then those in steps of `LINE`.
const GRAINED: usize = LARGEST / GRAIN;
const CLASSES: usize = GRAINED + LARGEST / LINE;

/// How much address space to ask for, in order: nothing is used until written to.
#[cfg(all(unix, not(miri)))]
const RESERVATIONS: [usize; 3] = [4 << 30, 1 << 30, 256 << 20];
/// Under Miri (which backs every page it maps), a region the tests fit in.
#[cfg(all(unix, miri))]
const RESERVATIONS: [usize; 1] = [8 << 20];
/// Address space only: pages are taken when written to (Miri knows no other kind).
#[cfg(all(unix, not(miri)))]
const MAPPING: libc::c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
#[cfg(all(unix, miri))]
const MAPPING: libc::c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;

thread_local! {
    static APART: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` with this thread's allocations kept apart (for the values it keeps for long).
pub fn apart<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            APART.with(|apart| apart.set(self.0));
        }
    }
    let _restore = Restore(APART.with(|apart| apart.replace(true)));
    f()
}

/// Whether a value is in the region (for tests of what is kept apart).
pub fn holds<T: ?Sized>(value: &T) -> bool {
    REGION.contains(value as *const T as *const u8 as *mut u8)
}

/// The process's allocator: a general-purpose one (`A`, the system's unless the process
/// installs another), and the region for what is allocated `apart`.
pub struct Allocator<A = System>(pub A);

/// Region states.
const UNSET: u8 = 0;
const READY: u8 = 1;
const UNAVAILABLE: u8 = 2;

struct Region {
    state: AtomicU8,
    start: AtomicUsize,
    /// The mapping itself: every slot's pointer is made from it (with its address), so that
    /// it carries the mapping's provenance (Miri checks it with -Zmiri-strict-provenance).
    base: AtomicPtr<u8>,
    end: AtomicUsize,
    lock: AtomicBool,
    slots: UnsafeCell<Slots>,
}

/// The region's use, under its lock.
struct Slots {
    /// Where never-used space begins.
    next: usize,
    /// The first free slot of each size (each free slot holds the address of the next).
    free: [usize; CLASSES],
}

// SAFETY: `slots` is only touched while `lock` is held.
unsafe impl Sync for Region {}

static REGION: Region = Region {
    state: AtomicU8::new(UNSET),
    start: AtomicUsize::new(0),
    base: AtomicPtr::new(std::ptr::null_mut()),
    end: AtomicUsize::new(0),
    lock: AtomicBool::new(false),
    slots: UnsafeCell::new(Slots {
        next: 0,
        free: [0; CLASSES],
    }),
};

impl Region {
    /// A pointer to an address in the region.
    fn pointer(&self, addr: usize) -> *mut u8 {
        self.base.load(Ordering::Acquire).with_addr(addr)
    }

    fn contains(&self, ptr: *mut u8) -> bool {
        let addr = ptr.addr();
        addr >= self.start.load(Ordering::Acquire) && addr < self.end.load(Ordering::Acquire)
    }

    /// A spin lock: taken briefly and rarely contended (only for values kept apart), and
    /// an allocator cannot use a lock that might allocate.
    fn with<R>(&self, f: impl FnOnce(&mut Slots) -> R) -> R {
        while (self.lock)
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: the lock is held until the end of this call.
        let result = f(unsafe { &mut *self.slots.get() });
        self.lock.store(false, Ordering::Release);
        result
    }

    /// Reserve the address space at the first use (under the lock).
    fn ensure(&self, slots: &mut Slots) -> bool {
        match self.state.load(Ordering::Acquire) {
            READY => return true,
            UNAVAILABLE => return false,
            _ => {}
        }
        match reserve() {
            Some((base, size)) => {
                let start = base.addr();
                slots.next = start;
                self.base.store(base, Ordering::Release);
                self.start.store(start, Ordering::Release);
                self.end.store(start + size, Ordering::Release);
                self.state.store(READY, Ordering::Release);
                true
            }
            None => {
                self.state.store(UNAVAILABLE, Ordering::Release);
                false
            }
        }
    }

    fn alloc(&self, class: usize) -> Option<*mut u8> {
        self.with(|slots| {
            if !self.ensure(slots) {
                return None;
            }
            let free = slots.free[class];
            if free != 0 {
                let slot = self.pointer(free);
                // SAFETY: a free slot of this region holds the address of the next one.
                slots.free[class] = unsafe { *(slot as *const usize) };
                return Some(slot);
            }
            let (size, align) = slot_of(class);
            let slot = slots.next.next_multiple_of(align);
            let end = self.end.load(Ordering::Relaxed);
            if slot + size > end {
                return None; // full: the general allocator's from now on
            }
            slots.next = slot + size;
            Some(self.pointer(slot))
        })
    }

    fn free(&self, ptr: *mut u8, class: usize) {
        self.with(|slots| {
            // SAFETY: the slot is ours again and at least a word big. Written through the
            // region's own pointer: the one freed may reach only the value's bytes (as few as
            // one), not the whole slot.
            unsafe { *(self.pointer(ptr.addr()) as *mut usize) = slots.free[class] };
            slots.free[class] = ptr.addr();
        })
    }
}

#[cfg(unix)]
fn reserve() -> Option<(*mut u8, usize)> {
    for size in RESERVATIONS {
        // SAFETY: a fresh anonymous private mapping; nothing else refers to it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                MAPPING,
                -1,
                0,
            )
        };
        if ptr != libc::MAP_FAILED {
            return Some((ptr.cast(), size));
        }
    }
    None
}

#[cfg(not(unix))]
fn reserve() -> Option<(*mut u8, usize)> {
    None
}

/// The slot size class of an allocation that may go to the region.
fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size().max(1);
    if size > LARGEST {
        None
    } else if layout.align() <= GRAIN {
        Some(size.div_ceil(GRAIN) - 1)
    } else if layout.align() <= LINE {
        Some(GRAINED + size.div_ceil(LINE) - 1)
    } else {
        None
    }
}

/// A class's slot size and alignment.
fn slot_of(class: usize) -> (usize, usize) {
    if class < GRAINED {
        ((class + 1) * GRAIN, GRAIN)
    } else {
        ((class - GRAINED + 1) * LINE, LINE)
    }
}

fn is_apart() -> bool {
    APART.with(Cell::get)
}

// SAFETY: every pointer is either the general allocator's (and given back to it) or a slot
// of the region that no other allocation has until freed; `contains` tells which.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Allocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_apart() {
            if let Some(ptr) = class_of(layout).and_then(|class| REGION.alloc(class)) {
                return ptr;
            }
        }
        // SAFETY: the caller's layout, passed on as `GlobalAlloc::alloc` promises it.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_apart() {
            // SAFETY: the caller's layout, as in `alloc`.
            let ptr = unsafe { self.alloc(layout) };
            if !ptr.is_null() {
                // SAFETY: a fresh allocation of at least `layout.size()` bytes.
                unsafe { std::ptr::write_bytes(ptr, 0, layout.size()) };
            }
            return ptr;
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if REGION.contains(ptr) {
            let class = class_of(layout).expect("only small allocations are in the region");
            REGION.free(ptr, class);
        } else {
            // SAFETY: not the region's, so the general allocator's, with its layout.
            unsafe { self.0.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !REGION.contains(ptr) && !is_apart() {
            // SAFETY: the general allocator's pointer, and the caller's promises, passed on.
            return unsafe { self.0.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller promises a valid size for this alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a valid layout (above).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both allocations hold at least the smaller size, and are distinct; the
            // old one is given back once, with its own layout.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The tests' own allocations go through it, as the engine's do (its crate root sets it);
    // not under Miri, where only the tests that call it directly run (see `Marked`).
    #[cfg(not(miri))]
    #[global_allocator]
    static ALLOCATOR: Allocator = Allocator(System);

    #[test]
    #[cfg_attr(miri, ignore = "a Box in the region: see Marked")]
    fn values_allocated_apart_are_in_the_region_and_others_are_not() {
        let kept: Box<[u64]> = apart(|| vec![1, 2, 3].into_boxed_slice());
        let other: Box<[u64]> = vec![1, 2, 3].into_boxed_slice();
        assert!(holds(&*kept), "no region on this system?");
        assert!(!holds(&*other));
        assert_eq!(*kept, [1, 2, 3]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "a Box in the region: see Marked")]
    fn values_aligned_to_a_cache_line_are_kept_apart_aligned() {
        // The size of a tokio task's cell; a size no other test uses.
        #[repr(align(128))]
        struct Padded([u8; 640]);
        let first: Box<Padded> = apart(|| Box::new(Padded([1; 640])));
        assert!(holds(&*first));
        let address = &*first as *const Padded as usize;
        assert_eq!(address % 128, 0);
        drop(first);
        let second: Box<Padded> = apart(|| Box::new(Padded([2; 640])));
        assert_eq!(
            &*second as *const Padded as usize, address,
            "the slot, used again"
        );
        assert_eq!(second.0[639], 2);
        drop(second);
        // A plain value of the same size has slots of its own: the freed aligned one is
        // not given to it.
        let plain: Box<[u8; 640]> = apart(|| Box::new([3; 640]));
        assert!(holds(&*plain));
        assert_ne!(&*plain as *const [u8; 640] as usize, address);
    }

    #[test]
    #[cfg_attr(miri, ignore = "a Box in the region: see Marked")]
    fn big_values_are_the_systems_even_apart() {
        let big: Box<[u8]> = apart(|| vec![7u8; LARGEST + 1].into_boxed_slice());
        assert!(!holds(&*big));
    }

    #[test]
    #[cfg_attr(miri, ignore = "a Box in the region: see Marked")]
    fn a_freed_slot_is_used_again_for_the_same_size() {
        // A size no other test uses, so that parallel tests do not take the slot.
        let first: Box<[u8; 488]> = apart(|| Box::new([1; 488]));
        let address = &*first as *const [u8; 488];
        drop(first);
        let second: Box<[u8; 488]> = apart(|| Box::new([2; 488]));
        assert_eq!(&*second as *const [u8; 488], address);
        assert_eq!(second[487], 2);
    }

    #[test]
    #[cfg_attr(miri, ignore = "a Box in the region: see Marked")]
    fn values_grow_and_leave_the_region_with_their_content() {
        let mut list: Vec<u32> = apart(|| (0..10).collect());
        assert!(holds(list.as_slice()));
        list.extend(10..20); // reallocated outside `apart`: the system's now
        assert!(!holds(list.as_slice()));
        assert_eq!(list, (0..20).collect::<Vec<_>>());
        let moved_in: Vec<u32> = apart(|| {
            let mut list = list.clone();
            list.extend(20..30);
            list
        });
        assert!(holds(moved_in.as_slice()));
        assert_eq!(moved_in, (0..30).collect::<Vec<_>>());
    }

    #[test]
    #[cfg_attr(miri, ignore = "a Box in the region: see Marked")]
    fn zeroed_values_are_zeros_even_in_reused_slots() {
        drop(apart(|| Box::new([0xffu8; 472])));
        let zeros: Box<[u8]> = apart(|| vec![0u8; 472].into_boxed_slice());
        assert!(zeros.iter().all(|byte| *byte == 0));
    }

    /// A value kept apart, filled with a pattern of its own, checked when it is freed: a
    /// slot given to two values at once, or written by the free list, breaks the pattern.
    /// Allocated with the allocator's own calls (not a `Box`): under Miri, a global
    /// allocator that writes its free list into a `Box`'s memory as it is dropped is
    /// reported for the `Box`'s protector (rust-lang/miri#2104, yvt/rlsf#20), so this is
    /// how the region's code is checked there.
    struct Marked {
        ptr: *mut u8,
        layout: Layout,
        mark: u8,
    }

    // SAFETY: the memory is owned by the value alone (handed between threads whole).
    unsafe impl Send for Marked {}

    impl Marked {
        fn new(size: usize, align: usize, mark: u8, zeroed: bool) -> Self {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a valid layout (just made).
            let ptr = apart(|| unsafe {
                if zeroed {
                    Allocator(System).alloc_zeroed(layout)
                } else {
                    Allocator(System).alloc(layout)
                }
            });
            assert!(!ptr.is_null());
            assert_eq!(ptr.addr() % align, 0, "misaligned");
            if zeroed {
                // SAFETY: within the allocation of `size` bytes.
                assert!((0..size).all(|i| unsafe { *ptr.add(i) } == 0), "not zeroed");
            }
            // SAFETY: the allocation is `size` bytes.
            unsafe { std::ptr::write_bytes(ptr, mark, size) };
            Marked { ptr, layout, mark }
        }

        fn check(&self) {
            // SAFETY: within the value's own allocation.
            let whole = (0..self.layout.size()).all(|i| unsafe { *self.ptr.add(i) } == self.mark);
            assert!(
                whole,
                "a value of {} bytes was overwritten",
                self.layout.size()
            );
        }

        /// Grown or shrunk (in the region or out of it), its pattern kept, the rest marked.
        fn resize(&mut self, size: usize) {
            self.check();
            // SAFETY: the value's own pointer and layout, a nonzero size.
            let ptr = apart(|| unsafe { Allocator(System).realloc(self.ptr, self.layout, size) });
            assert!(!ptr.is_null());
            let kept = self.layout.size().min(size);
            assert!(
                // SAFETY: within the new allocation of `size` bytes.
                (0..kept).all(|i| unsafe { *ptr.add(i) } == self.mark),
                "content lost"
            );
            // SAFETY: the new allocation is `size` bytes.
            unsafe { std::ptr::write_bytes(ptr, self.mark, size) };
            self.ptr = ptr;
            self.layout = Layout::from_size_align(size, self.layout.align()).unwrap();
        }
    }

    impl Drop for Marked {
        fn drop(&mut self) {
            self.check();
            // SAFETY: the value's own allocation, given back once.
            unsafe { Allocator(System).dealloc(self.ptr, self.layout) };
        }
    }

    /// Deterministic choices for the stress test (xorshift: no dependency).
    struct Choices(u64);

    impl Choices {
        fn below(&mut self, bound: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % bound as u64) as usize
        }

        /// One byte to a few hundred; one in 16 up to past the largest slot (the system's).
        fn size(&mut self) -> usize {
            let bound = if self.below(16) == 0 {
                LARGEST + 200
            } else {
                600
            };
            1 + self.below(bound)
        }
    }

    #[test]
    fn many_threads_allocating_and_freeing_at_once_keep_every_value_whole() {
        // Fewer rounds under Miri, which interprets every step (and checks each access).
        let (threads, rounds) = if cfg!(miri) { (4, 100) } else { (8, 10_000) };
        let handed = std::sync::Mutex::new(Vec::<Marked>::new()); // freed by another thread
        std::thread::scope(|scope| {
            for thread in 0..threads {
                let handed = &handed;
                scope.spawn(move || {
                    let mut choose = Choices(0x9e37_79b9_7f4a_7c15 ^ (thread as u64 + 1));
                    let mut kept: Vec<Marked> = Vec::new();
                    for round in 0..rounds {
                        let mark = (round % 251) as u8 + 1;
                        let (size, align) = (choose.size(), [1, 8, 16, 64, 128][choose.below(5)]);
                        kept.push(Marked::new(size, align, mark, choose.below(8) == 0));
                        match choose.below(5) {
                            0 => drop(kept.swap_remove(choose.below(kept.len()))),
                            1 => {
                                let value = kept.swap_remove(choose.below(kept.len()));
                                handed.lock().unwrap().push(value);
                            }
                            2 => drop(handed.lock().unwrap().pop()),
                            3 => {
                                let (at, size) = (choose.below(kept.len()), choose.size());
                                kept[at].resize(size);
                            }
                            _ => {}
                        }
                        if kept.len() > 64 {
                            kept.drain(..32);
                        }
                    }
                });
            }
        });
        drop(handed);
    }

    #[test]
    fn apart_ends_with_its_closure_even_on_a_panic() {
        let result = std::panic::catch_unwind(|| apart(|| panic!("inside")));
        assert!(result.is_err());
        assert!(!is_apart());
    }
}
