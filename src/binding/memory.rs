//! The process's memory as glibc's allocator keeps it: fewer arenas, and free memory given
//! back to the system after bursts (listing 10,000 objects allocates a lot at once, and
//! glibc keeps freed memory inside its heaps unless asked to return it). The core's own
//! values are mimalloc's (`src/lib.rs`); glibc's are Python's bigger objects (the bodies'
//! dicts and lists made for handlers, on the loop's and the handlers' threads).

/// glibc gives every thread that allocates under contention an arena of its own, and
/// Python's threads here allocate a lot of short-lived bodies: with the default (8 per core)
/// half of an operator's memory was arenas' slack. Two are plenty for a loop and tokio.
/// An explicit `MALLOC_ARENA_MAX` in the environment is respected.
pub fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tunable of the allocator; it is safe to call at any time.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// How often the free memory may be handed back (a trim walks the heaps: a few milliseconds).
const TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Hand the allocator's free pages back to the system every few seconds while the operator
/// runs (a task of the current tokio runtime) — but only after some activity: when the
/// resident size has changed since the previous trim. At rest nothing is freed, and the
/// walk of a large heap would be the only thing that wakes the process.
pub fn trim_periodically() -> tokio::task::JoinHandle<()> {
    crate::util::tasks::spawn(async {
        let mut after_last_trim = None;
        loop {
            tokio::time::sleep(TRIM_INTERVAL).await;
            let resident = resident_pages();
            if resident.is_none() || resident != after_last_trim {
                trim();
                after_last_trim = resident_pages();
            }
        }
    })
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The process's resident size in pages (none where `/proc` is not there: then every time).
fn resident_pages() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    statm.split_whitespace().nth(1)?.parse().ok()
}
