//! Gavel's openraft [`AsyncRuntime`]: tokio, as openraft's own
//! `TokioRuntime`, except for the random numbers.
//!
//! openraft 0.10 draws each election timeout (at start and again on every
//! campaign) and each node's tick phase from `AsyncRuntime::thread_rng`.
//! In production that is `rand::rng()`; a simulator that seeds this
//! thread ([`seed_thread_rng`]) gets the same draws in the same order, so the
//! same seed elects the same leaders. The simulator runs every node on one
//! thread, in an order its seed fixes, so one RNG per thread is one RNG per
//! simulated cluster and the draws are replayed exactly.

#[cfg(feature = "sim")]
use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend};
use openraft_rt_tokio::{TokioInstant, TokioRuntime};
#[cfg(feature = "sim")]
use rand::rngs::StdRng;
#[cfg(feature = "sim")]
use rand::SeedableRng;
use rand::{Rng, TryRng};

#[cfg(feature = "sim")]
thread_local! {
    /// The seeded generator of this thread, if a simulator seeded it.
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Makes every random draw the Raft layer takes on this thread (election
/// timeouts, the tick phase) come from a generator seeded with `seed`, until
/// [`unseed_thread_rng`]. For the simulator (the feature `sim`).
#[cfg(feature = "sim")]
pub fn seed_thread_rng(seed: u64) {
    SEEDED.with(|seeded| *seeded.borrow_mut() = Some(StdRng::seed_from_u64(seed)));
}

/// Returns this thread to real randomness.
#[cfg(feature = "sim")]
pub fn unseed_thread_rng() {
    SEEDED.with(|seeded| *seeded.borrow_mut() = None);
}

/// openraft's runtime with Gavel's random numbers.
///
/// openraft 0.10 asks a runtime for a value (`new`, `block_on`) as well as for
/// its associated functions; the value is a tokio runtime, as openraft's own.
#[derive(Debug)]
pub(crate) struct GavelRuntime(TokioRuntime);

/// The random numbers of [`GavelRuntime`]: this thread's seeded generator
/// when there is one, `rand::rng()` otherwise.
pub(crate) struct RuntimeRng;

impl RuntimeRng {
    #[cfg(feature = "sim")]
    fn draw<T>(with: impl FnOnce(&mut dyn Rng) -> T) -> T {
        SEEDED.with(|seeded| match seeded.borrow_mut().as_mut() {
            Some(rng) => with(rng),
            None => with(&mut rand::rng()),
        })
    }

    /// Without the feature `sim` nothing seeds a thread: `rand::rng()`.
    #[cfg(not(feature = "sim"))]
    fn draw<T>(with: impl FnOnce(&mut dyn Rng) -> T) -> T {
        with(&mut rand::rng())
    }
}

// rand 0.10's `Rng` is implemented for every infallible `TryRng`.
impl TryRng for RuntimeRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(Self::draw(|rng| rng.next_u32()))
    }
    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(Self::draw(|rng| rng.next_u64()))
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Infallible> {
        Self::draw(|rng| rng.fill_bytes(dest));
        Ok(())
    }
}

impl AsyncRuntime for GavelRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = RuntimeRng;
    type Mpsc = <TokioRuntime as AsyncRuntime>::Mpsc;
    type Watch = <TokioRuntime as AsyncRuntime>::Watch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        RuntimeRng
    }

    fn new(threads: usize) -> Self {
        GavelRuntime(TokioRuntime::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }
}

#[cfg(test)]
mod tests {
    use rand::RngExt;

    use super::*;

    fn draws() -> Vec<u64> {
        (0..4).map(|_| GavelRuntime::thread_rng().random_range(400..800)).collect()
    }

    #[test]
    fn a_seeded_thread_draws_the_same_election_timeouts_again() {
        seed_thread_rng(7);
        let first = draws();
        seed_thread_rng(7);
        assert_eq!(draws(), first);
        seed_thread_rng(8);
        assert_ne!(draws(), first);
        unseed_thread_rng();
        assert!(draws().iter().all(|draw| (400..800).contains(draw)));
    }
}
