//! Waits that are mostly over before they begin.
//!
//! An `async fn` awaited on the call path puts its whole future (every local it holds across
//! every wait, a kilobyte or more) into its caller's, and each call builds it and copies it in,
//! even when the first lines return at once: no session to adopt, no app limited, no token to
//! exchange, no guard to ask. Such a function is a plain `fn` returning [`Quick`]: the answer at
//! once in a future of its own size ([`now`]), or the slow part boxed ([`later`]), paid only by
//! the calls that need it.

use futures_util::future::{ready, BoxFuture, Either, Ready};
use std::future::Future;

/// An answer now, or a boxed wait for it.
pub(crate) type Quick<'a, T> = Either<Ready<T>, BoxFuture<'a, T>>;

/// The answer, at once.
pub(crate) fn now<'a, T>(value: T) -> Quick<'a, T> {
    Either::Left(ready(value))
}

/// The answer after `wait`, boxed.
pub(crate) fn later<'a, T>(wait: impl Future<Output = T> + Send + 'a) -> Quick<'a, T> {
    Either::Right(Box::pin(wait))
}
