//! A thread pool's crew: which of its threads rest, which are up, and whether a queued job
//! wakes one of them or is left to a thread that is busy now.
//!
//! Waking a resting thread for every job costs a wake-up each time, and where the threads
//! run Python, a second thread woken while the first runs only waits for the GIL: more
//! switches, no more progress (storm-100: 1.41–1.58 CPU-s with six threads, 1.19–1.32 with
//! one). So while a thread is up, or started its job less than `grace` ago, queued jobs are
//! left to it: it likely finishes soon and takes them one after another. If it does not (its
//! job blocks), whoever queued a job asks again after `grace` ([`Crew::spread`]), and a
//! resting thread is woken then: a blocked thread delays the others' jobs by `grace` at most.

use std::time::{Duration, Instant};

/// What to do for a queued job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handoff {
    /// Wake this resting thread (by its number).
    Wake(usize),
    /// Start one more thread.
    Start,
    /// Nothing now: a thread that is up takes it (or none is free; ask again later).
    Leave,
}

#[derive(Debug, Clone, Copy)]
enum Duty {
    /// Waiting for a job, until woken.
    Resting,
    /// Awake (or woken), about to look at the queue: it takes the next job.
    Up,
    /// Running a job since then.
    Busy(Instant),
}

/// The pool's record of its threads, kept under the pool's lock; threads are numbered as
/// they start ([`Crew::start`]).
#[derive(Debug)]
pub struct Crew {
    limit: usize,
    grace: Duration,
    duties: Vec<Duty>,
    /// The resting threads, the one that rested last on top: woken first, as its memory
    /// (and its Python thread state) is the likeliest to be in the caches still.
    resting: Vec<usize>,
}

impl Crew {
    /// A crew of at most `limit` threads, each resting `grace` before it ends.
    pub fn new(limit: usize, grace: Duration) -> Self {
        Self {
            limit: limit.max(1),
            grace,
            duties: Vec::new(),
            resting: Vec::new(),
        }
    }

    /// A job was queued: who takes it. After a [`Handoff::Start`], the thread to start is
    /// numbered by [`Crew::start`].
    pub fn place(&mut self, now: Instant) -> Handoff {
        let taker = self.duties.iter().any(|duty| match duty {
            Duty::Resting => false,
            Duty::Up => true,
            Duty::Busy(since) => now.saturating_duration_since(*since) < self.grace,
        });
        if taker {
            return Handoff::Leave;
        }
        self.spread()
    }

    /// Jobs still wait `grace` after they were queued: one more thread for them, if any is free.
    pub fn spread(&mut self) -> Handoff {
        if let Some(thread) = self.resting.pop() {
            self.duties[thread] = Duty::Up;
            Handoff::Wake(thread)
        } else if self.duties.len() < self.limit {
            Handoff::Start
        } else {
            Handoff::Leave
        }
    }

    /// A thread is to start (after [`Handoff::Start`]): its number. It is up from now on.
    pub fn start(&mut self) -> usize {
        self.duties.push(Duty::Up);
        self.duties.len() - 1
    }

    /// The thread could not be started after all.
    pub fn unstart(&mut self) {
        self.duties.pop();
    }

    /// How many threads have been started.
    pub fn started(&self) -> usize {
        self.duties.len()
    }

    /// The thread took a job.
    pub fn busy(&mut self, thread: usize, now: Instant) {
        self.duties[thread] = Duty::Busy(now);
    }

    /// The thread found no job: it rests until woken.
    pub fn rest(&mut self, thread: usize) {
        self.duties[thread] = Duty::Resting;
        self.resting.push(thread);
    }

    /// The thread woke up: woken by [`Handoff::Wake`], or not (the pool is closing, say:
    /// then it is no longer among the resting ones either).
    pub fn woke(&mut self, thread: usize) {
        if let Duty::Resting = self.duties[thread] {
            self.resting.retain(|&other| other != thread);
            self.duties[thread] = Duty::Up;
        }
    }

    /// Whether the thread is still to rest (not woken yet).
    pub fn is_resting(&self, thread: usize) -> bool {
        matches!(self.duties[thread], Duty::Resting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_millis(1);

    #[test]
    fn the_first_job_starts_a_thread_and_a_resting_one_is_woken_later() {
        let now = Instant::now();
        let mut crew = Crew::new(2, GRACE);
        assert_eq!(crew.place(now), Handoff::Start);
        let first = crew.start();
        crew.busy(first, now);
        crew.rest(first);
        assert!(crew.is_resting(first));
        assert_eq!(crew.place(now), Handoff::Wake(first));
        assert!(!crew.is_resting(first));
        // Woken but not up yet: it takes the next job too.
        assert_eq!(crew.place(now), Handoff::Leave);
        crew.woke(first);
        assert_eq!(crew.place(now), Handoff::Leave);
    }

    #[test]
    fn jobs_are_left_to_a_thread_that_has_just_become_busy_until_the_grace_is_over() {
        let now = Instant::now();
        let mut crew = Crew::new(6, GRACE);
        assert_eq!(crew.place(now), Handoff::Start);
        let first = crew.start();
        crew.busy(first, now);
        assert_eq!(crew.place(now), Handoff::Leave);
        assert_eq!(crew.place(now), Handoff::Leave);
        // Still waiting after the grace: one more thread each time it is asked.
        assert_eq!(crew.spread(), Handoff::Start);
    }

    #[test]
    fn a_thread_busy_for_longer_than_the_grace_does_not_take_the_next_job() {
        let now = Instant::now();
        let mut crew = Crew::new(6, GRACE);
        let first = crew.start();
        crew.busy(first, now);
        assert_eq!(crew.place(now + 2 * GRACE), Handoff::Start);
    }

    #[test]
    fn the_thread_that_rested_last_is_woken_first_then_new_ones_up_to_the_limit() {
        let now = Instant::now();
        let mut crew = Crew::new(4, GRACE);
        let (first, second, third) = (crew.start(), crew.start(), crew.start());
        crew.rest(first);
        crew.rest(second);
        crew.busy(third, now);
        assert_eq!(crew.spread(), Handoff::Wake(second));
        assert_eq!(crew.spread(), Handoff::Wake(first));
        assert_eq!(crew.spread(), Handoff::Start);
        crew.start();
        assert_eq!(crew.spread(), Handoff::Leave);
        assert_eq!(crew.started(), 4);
    }

    #[test]
    fn a_thread_that_wakes_by_itself_is_not_woken_again() {
        let now = Instant::now();
        let mut crew = Crew::new(2, GRACE);
        let (first, second) = (crew.start(), crew.start());
        crew.rest(first);
        crew.rest(second);
        crew.woke(second);
        crew.busy(second, now - 2 * GRACE);
        assert_eq!(crew.place(now), Handoff::Wake(first));
        assert_eq!(crew.spread(), Handoff::Leave);
    }

    #[test]
    fn a_thread_that_cannot_start_is_not_counted() {
        let mut crew = Crew::new(1, GRACE);
        assert_eq!(crew.place(Instant::now()), Handoff::Start);
        crew.start();
        crew.unstart();
        assert_eq!(crew.started(), 0);
        assert_eq!(crew.place(Instant::now()), Handoff::Start);
    }
}
