//! Waiting until a request's due instant to within microseconds. tokio's timer ticks in
//! whole milliseconds (a deadline is rounded up to the next tick, and the poller's timeout
//! to a millisecond again): a sleep ends up to 2 ms after its deadline. On Linux a timerfd
//! (a high-resolution timer the runtime's poller watches like a socket) wakes the runtime
//! [`SPIN`] before the due instant, and the rest is spent yielding to the runtime, so the
//! answers of requests in flight are still read meanwhile. Spinning briefly matters on a
//! loaded host: a thread that sleeps is woken ahead of busy ones, a thread that spins for
//! milliseconds is preempted like them. Elsewhere the tokio timer wakes it
//! [`TIMER_SLACK`] early.

use std::time::Duration;

use tokio::time::Instant;

/// How early tokio's timer is asked to wake (its tick and the poller's rounding).
pub const TIMER_SLACK: Duration = Duration::from_micros(2500);

/// How long before the due instant the high-resolution timer wakes the runtime: the
/// timer's slack (set to 1 ns for this thread where allowed) and a wake-up's latency.
pub const SPIN: Duration = Duration::from_micros(250);

/// Waits until `at`: asleep until shortly before it, then yielding until it passes.
pub async fn wait_until(at: Instant) {
    #[cfg(target_os = "linux")]
    {
        if let Some(early) = at.checked_sub(SPIN) {
            let left = early.saturating_duration_since(Instant::now());
            if !left.is_zero() && hr_sleep(left).await.is_err() {
                tokio::time::sleep_until(at.checked_sub(TIMER_SLACK).unwrap_or(early)).await;
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        if let Some(early) = at.checked_sub(TIMER_SLACK) {
            tokio::time::sleep_until(early).await;
        }
    }
    while Instant::now() < at {
        tokio::task::yield_now().await;
    }
}

/// Asks the kernel for the least timer slack on this thread (the default lets a timer end
/// up to 50 µs late); unprivileged, and harmless where refused.
#[cfg(target_os = "linux")]
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// See the Linux version: nothing to tighten elsewhere.
#[cfg(not(target_os = "linux"))]
pub fn tighten_timer_slack() {}

/// A one-shot timerfd, closed on drop.
#[cfg(target_os = "linux")]
struct TimerFd(std::os::fd::OwnedFd);

#[cfg(target_os = "linux")]
impl std::os::fd::AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

/// Sleeps `d` on a timerfd the runtime's poller watches.
#[cfg(target_os = "linux")]
async fn hr_sleep(d: Duration) -> std::io::Result<()> {
    use std::os::fd::FromRawFd;
    // SAFETY: timerfd_create returns a new descriptor we own, or -1.
    let fd = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a valid descriptor nobody else owns.
    let timer = TimerFd(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: d.as_secs() as libc::time_t,
            // A zero it_value would disarm the timer: at least 1 ns.
            tv_nsec: (d.subsec_nanos().max(u32::from(d.as_secs() == 0))) as libc::c_long,
        },
    };
    // SAFETY: `spec` is a valid itimerspec; the old value is not asked for.
    if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the TimerFd owns its descriptor, open until the AsyncFd drops it, and always
    // returns that one.
    let afd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(timer, tokio::io::Interest::READABLE)
    }
    .map_err(std::io::Error::from)?;
    let mut guard = afd.readable().await?;
    guard.clear_ready();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wait_never_ends_before_its_instant() {
        tighten_timer_slack();
        for us in [0u64, 100, 300, 3000] {
            let at = Instant::now() + Duration::from_micros(us);
            wait_until(at).await;
            assert!(Instant::now() >= at, "{us} µs");
        }
    }
}
