//! Each webhook's pace: a token bucket (its posts per second, at most
//! [`RATE_BURST_SECONDS`] of them at once) and a bound on its requests
//! outstanding ([`POSTS_IN_FLIGHT_PER_WEBHOOK_MAX`]). The bucket's
//! arithmetic is a plain value with the time passed in ([`Bucket`]), tested
//! without a clock; [`Pace`] is its tokio shell, shared by every post to
//! one webhook URL.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::limits::{POSTS_IN_FLIGHT_PER_WEBHOOK_MAX, RATE_BURST_SECONDS};

/// A token bucket: tokens come back at `posts_per_second` up to the burst;
/// each attempt of a post takes one. A receiver's `Retry-After` on a 429
/// pauses it: no token until the pause ends, and the bucket starts empty then.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    posts_per_second: f64,
    burst: f64,
    tokens: f64,
    /// The instant `tokens` was counted at.
    counted_at: Instant,
    paused_until: Option<Instant>,
}

impl Bucket {
    /// A full bucket for `posts_per_second` (positive and finite), counted at `now`.
    pub fn new(posts_per_second: f64, now: Instant) -> Bucket {
        let burst = (posts_per_second * RATE_BURST_SECONDS).floor().max(1.0);
        Bucket { posts_per_second, burst, tokens: burst, counted_at: now, paused_until: None }
    }

    /// The tokens come back for the time since they were last counted.
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.counted_at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.posts_per_second).min(self.burst);
        self.counted_at = self.counted_at.max(now);
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        if let Some(until) = self.paused_until {
            if now < until {
                return Err(until - now);
            }
            self.paused_until = None;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - self.tokens) / self.posts_per_second))
    }

    /// Puts back a token taken for a post that was not sent (an approval no
    /// longer pending, a webhook that had already answered it).
    pub fn give_back(&mut self, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens + 1.0).min(self.burst);
    }

    /// No token before `now + pause`, and none saved up from before it: the
    /// receiver said it is over its limit.
    pub fn pause(&mut self, now: Instant, pause: Duration) {
        let until = now + pause;
        self.paused_until = Some(self.paused_until.map_or(until, |paused| paused.max(until)));
        self.tokens = 0.0;
        self.counted_at = self.counted_at.max(until);
    }
}

/// One webhook URL's pace, shared by every post to it.
#[derive(Debug)]
pub struct Pace {
    /// `None`: no rate limit (a lone [`crate::webhook::Poster::deliver`]).
    bucket: Option<Mutex<Bucket>>,
    /// Whoever waits for a token waits in turn: tokio's mutex queues its
    /// waiters first come, first served, so a waiting post is not overtaken.
    turn: tokio::sync::Mutex<()>,
    /// Requests outstanding at once.
    requests: tokio::sync::Semaphore,
}

impl Pace {
    /// A pace of `posts_per_second` (positive and finite).
    pub fn new(posts_per_second: f64) -> Pace {
        Pace {
            bucket: Some(Mutex::new(Bucket::new(posts_per_second, Instant::now()))),
            turn: tokio::sync::Mutex::new(()),
            requests: tokio::sync::Semaphore::new(POSTS_IN_FLIGHT_PER_WEBHOOK_MAX),
        }
    }

    /// No rate limit; still at most [`POSTS_IN_FLIGHT_PER_WEBHOOK_MAX`] requests at once.
    pub fn unlimited() -> Pace {
        Pace {
            bucket: None,
            turn: tokio::sync::Mutex::new(()),
            requests: tokio::sync::Semaphore::new(POSTS_IN_FLIGHT_PER_WEBHOOK_MAX),
        }
    }

    fn bucket(&self) -> Option<std::sync::MutexGuard<'_, Bucket>> {
        self.bucket.as_ref().map(|bucket| bucket.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Waits for a token, in turn with the other waiters.
    pub async fn token(&self) {
        if self.bucket.is_none() {
            return;
        }
        let _turn = self.turn.lock().await;
        loop {
            let wait = match self.bucket().map(|mut bucket| bucket.take(Instant::now())) {
                Some(Err(wait)) => wait,
                Some(Ok(())) | None => return,
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Puts back a token that was not used.
    pub fn give_back(&self) {
        if let Some(mut bucket) = self.bucket() {
            bucket.give_back(Instant::now());
        }
    }

    /// Gives no token for `pause` (a 429's `Retry-After`).
    pub fn pause(&self, pause: Duration) {
        if let Some(mut bucket) = self.bucket() {
            bucket.pause(Instant::now(), pause);
        }
    }

    /// A place among the requests outstanding, held while one request is out.
    pub async fn request(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.requests.acquire().await.expect("the semaphore is never closed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn a_full_bucket_gives_its_burst_then_one_token_per_interval() {
        let start = Instant::now();
        let mut bucket = Bucket::new(4.0, start);
        for _ in 0..4 {
            assert_eq!(bucket.take(start), Ok(()));
        }
        let wait = bucket.take(start).expect_err("the burst is spent");
        assert!(wait > ms(240) && wait <= ms(250), "{wait:?}");
        assert_eq!(bucket.take(start + ms(250)), Ok(()));
        assert!(bucket.take(start + ms(250)).is_err());
        // Idle for a minute: the bucket holds one second's worth, no more.
        let later = start + Duration::from_secs(60);
        let taken = (0..10).filter(|_| bucket.take(later).is_ok()).count();
        assert_eq!(taken, 4);
    }

    #[test]
    fn a_slow_rate_still_holds_one_token_and_waits_its_interval() {
        let start = Instant::now();
        let mut bucket = Bucket::new(0.5, start);
        assert_eq!(bucket.take(start), Ok(()));
        let wait = bucket.take(start).expect_err("one token only");
        assert!(wait > ms(1_990) && wait <= ms(2_000), "{wait:?}");
    }

    #[test]
    fn a_token_given_back_is_taken_again_and_the_burst_is_not_exceeded() {
        let start = Instant::now();
        let mut bucket = Bucket::new(1.0, start);
        assert_eq!(bucket.take(start), Ok(()));
        bucket.give_back(start);
        assert_eq!(bucket.take(start), Ok(()));
        bucket.give_back(start);
        bucket.give_back(start);
        assert_eq!(bucket.take(start), Ok(()));
        assert!(bucket.take(start).is_err(), "a burst of one");
    }

    #[test]
    fn a_pause_gives_nothing_until_it_ends_and_saves_nothing_up() {
        let start = Instant::now();
        let mut bucket = Bucket::new(10.0, start);
        bucket.pause(start, Duration::from_secs(2));
        assert_eq!(bucket.take(start + ms(1_000)), Err(ms(1_000)));
        // A shorter pause asked later does not cut the first one short.
        bucket.pause(start + ms(1_000), ms(100));
        assert!(bucket.take(start + ms(1_500)).is_err());
        // At its end the bucket is empty, and fills at the rate from then on.
        assert!(bucket.take(start + ms(2_000)).is_err());
        assert_eq!(bucket.take(start + ms(2_150)), Ok(()));
    }
}
