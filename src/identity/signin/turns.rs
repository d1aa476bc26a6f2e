//! Turns for the argon2 runs of password checks, shared fairly (docs/identity.md "Cost").
//!
//! Each check holds 19 MiB while it runs, and anyone may ask for one (a sign-in form), so at
//! most `web.password_checks` run at once (default: the number of cores, read at start) and
//! the others wait their turn (first come, first served). A sign-in takes a *place* before its
//! checks: there are [`places`] (the running ones and [`MAX_WAITING_PER_CHECK`] waiting per
//! turn), and past them a sign-in is refused (503, `Retry-After`) before it counts or checks
//! anything. Memory stays at `password_checks` x 19 MiB whatever the number of attempts.
//!
//! One client must not hold every place: with one queue, a single address sending sign-ins as
//! fast as it could kept everyone else's at 503. So an address (IPv6 by /64) holds at most
//! [`address_share`] places and an account (an e-mail) at most [`account_share`], refused
//! beyond (429, `Retry-After`); the rest stay for everyone else. A share counts what is
//! waiting and running, so it bounds the queue in front of another client, not only the CPU.
//! What it does not do: many addresses together can still fill the places (each bounded by its
//! share and by its password checks per ten minutes, `signin::ADDRESS_ATTEMPTS`).

use crate::edge::error::ApiError;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use tokio::sync::Semaphore;

/// Sign-ins that may wait for a turn, per turn: past it a sign-in is refused at once.
pub(crate) const MAX_WAITING_PER_CHECK: usize = 4;

/// The argon2 runs allowed at once, and the places held by sign-ins (in all and per holder).
struct Turns {
    turns: Semaphore,
    size: usize,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    total: usize,
    /// Places per address block (`a:`) and per account (`e:`); an entry leaves at zero.
    by: HashMap<String, usize>,
}

static CONFIGURED: AtomicUsize = AtomicUsize::new(0);

/// Sets how many argon2 runs may go at once (`web.password_checks`); takes effect only before
/// the first run (at start).
pub(crate) fn configure(concurrent: usize) {
    CONFIGURED.store(concurrent, Ordering::Relaxed);
}

fn turns() -> &'static Turns {
    static TURNS: OnceLock<Turns> = OnceLock::new();
    TURNS.get_or_init(|| {
        let size = match CONFIGURED.load(Ordering::Relaxed) {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        };
        Turns { turns: Semaphore::new(size), size, held: Mutex::default() }
    })
}

/// Places for `size` turns: the running checks and those waiting.
pub(crate) fn places(size: usize) -> usize {
    size * (1 + MAX_WAITING_PER_CHECK)
}

/// Places one address (IPv6 /64) may hold: an eighth, at least two (a double click).
pub(crate) fn address_share(size: usize) -> usize {
    (places(size) / 8).max(2)
}

/// Places one account may hold, from any number of addresses: a quarter, at least two.
pub(crate) fn account_share(size: usize) -> usize {
    (places(size) / 4).max(2)
}

/// Why a sign-in got no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoPlace {
    #[error("too many sign-ins at once; try again in a moment")]
    Full,
    #[error("too many sign-ins at once from this address; try again in a moment")]
    Address,
    #[error("too many sign-ins at once to this account; try again in a moment")]
    Account,
}

impl From<NoPlace> for ApiError {
    /// The server's places are full: 503; the client's own share is: 429. Either may retry in
    /// a second (a check takes tens of milliseconds).
    fn from(e: NoPlace) -> ApiError {
        let (status, code) = match e {
            NoPlace::Full => (503, "UNAVAILABLE"),
            NoPlace::Address | NoPlace::Account => (429, "RATE_LIMITED"),
        };
        ApiError::Rejected { status, code, message: e.to_string(), retry_after: Some(1) }
    }
}

/// A sign-in's place: given back when dropped.
pub(crate) struct Place {
    keys: [String; 2],
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut held = turns().held.lock();
        held.total -= 1;
        for key in &self.keys {
            if let Some(n) = held.by.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    held.by.remove(key);
                }
            }
        }
    }
}

/// A place for a sign-in from `ip` to `account` (an e-mail, lower case), held until the
/// [`Place`] is dropped; refused when the places are full or either share is.
pub(crate) fn admit(ip: IpAddr, account: &str) -> Result<Place, NoPlace> {
    let t = turns();
    let keys = [format!("a:{}", crate::data::limiter::address_block(ip, false)), format!("e:{account}")];
    let mut held = t.held.lock();
    let holds = |key: &String| held.by.get(key).copied().unwrap_or(0);
    if holds(&keys[0]) >= address_share(t.size) {
        return Err(NoPlace::Address);
    }
    if holds(&keys[1]) >= account_share(t.size) {
        return Err(NoPlace::Account);
    }
    if held.total >= places(t.size) {
        return Err(NoPlace::Full);
    }
    held.total += 1;
    for key in &keys {
        *held.by.entry(key.clone()).or_default() += 1;
    }
    Ok(Place { keys })
}

/// Runs `work` (an argon2 run) when a turn is free, off the proxy's threads.
pub(crate) async fn in_turn<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let _turn = turns().turns.acquire().await.ok()?;
    tokio::task::spawn_blocking(work).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_leave_room_for_others() {
        for size in [1, 2, 8, 64] {
            let (all, address, account) = (places(size), address_share(size), account_share(size));
            assert!(address < all && account < all, "{size}: {address} {account} of {all}");
            assert!(address <= account, "{size}");
        }
        assert_eq!((places(2), address_share(2), account_share(2)), (10, 2, 2));
        assert_eq!((places(8), address_share(8), account_share(8)), (40, 5, 10));
    }

    #[test]
    fn an_address_and_an_account_hold_their_share_and_give_it_back() {
        let size = turns().size;
        let ip: IpAddr = "2001:db8:7:7::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8:7:7:ffff::2".parse().unwrap();
        let mut held: Vec<Place> = (0..address_share(size)).map(|i| admit(ip, &format!("u{i}@t")).unwrap()).collect();
        assert_eq!(admit(same_64, "other@t").err(), Some(NoPlace::Address), "one /64 is one address");
        assert!(admit("2001:db8:7:8::1".parse().unwrap(), "other@t").is_ok(), "another /64 is not");
        held.pop();
        assert!(admit(same_64, "other@t").is_ok(), "a place given back is free again");
        drop(held);
        let account: Vec<Place> =
            (0..account_share(size)).map(|i| admit(IpAddr::from([10, 9, 0, i as u8]), "one@t").unwrap()).collect();
        assert_eq!(admit("10.9.1.1".parse().unwrap(), "one@t").err(), Some(NoPlace::Account));
        drop(account);
        assert!(admit("10.9.1.1".parse().unwrap(), "one@t").is_ok());
    }
}
