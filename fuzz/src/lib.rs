//! Fuzz targets for toolgate's parsers of untrusted (or operator-written) bytes, and the pieces
//! of the stable-toolchain driver in `main.rs` (`fuzz/README.md` says why this design).
//!
//! Each target is a plain `fn(&[u8]) -> Features`: it panics (through `assert!`) on a broken
//! property, and returns *what the parser did* (which variant, which error, how many items) as
//! a small feature map that the driver uses as its feedback in place of coverage: an input
//! showing a feature not seen before is kept and mutated further. The signature is libFuzzer's (`&[u8]`), so a
//! `fuzz_target!` wrapper can call the same functions once coverage instrumentation is
//! available on a stable toolchain.
#![forbid(unsafe_code)]

pub mod mutate;
pub mod targets;

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]) -> targets::Features,
    /// Longest input the driver generates: the size of what reaches the parser in production
    /// matters less than exploring structure, and a bound keeps the per-input allocation bound
    /// meaningful.
    pub max_len: usize,
    /// Tokens the mutator inserts (the grammar's keywords and troublemakers).
    pub dictionary: &'static [&'static [u8]],
    /// Seed directories besides `fuzz/corpus/<name>/`, relative to `fuzz/`: the shipped
    /// configuration files seed the config loader without a copy that could drift.
    pub extra_seeds: &'static [&'static str],
}

/// Every seed of a target, in a fixed order (file names sorted per directory): its corpus
/// directory, then its extra seed directories.
pub fn seeds(t: &Target) -> std::io::Result<Vec<(std::path::PathBuf, Vec<u8>)>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dirs = std::iter::once(root.join("corpus").join(t.name)).chain(t.extra_seeds.iter().map(|d| root.join(d)));
    let mut out = Vec::new();
    for dir in dirs {
        out.extend(read_dir_sorted(&dir)?);
    }
    Ok(out)
}

/// The files directly in `dir`, sorted by name, with their contents.
pub fn read_dir_sorted(dir: &std::path::Path) -> std::io::Result<Vec<(std::path::PathBuf, Vec<u8>)>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    paths.into_iter().map(|p| std::fs::read(&p).map(|data| (p, data))).collect()
}

pub fn targets() -> &'static [Target] {
    &targets::ALL
}

pub fn target(name: &str) -> Option<&'static Target> {
    targets().iter().find(|t| t.name == name)
}

/// Allocation a target may make for one input, beyond what was live before it: a fixed 32 MiB
/// plus 256 bytes per input byte. The parsers build trees of the input (a JSON `Value`, serde's
/// path for error messages, the events of a stream), which cost a small multiple of its size;
/// anything far beyond that is an allocation driven by a number in the input, not its size.
pub fn allocation_bound(input_len: usize) -> usize {
    32 * 1024 * 1024 + 256 * input_len
}

/// Stable FNV-1a hash, so that a run is reproducible from its seed (std's `HashMap` hasher is
/// randomised per process).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of `fuzz/corpus/<target>/` (the seeds and any input that once failed) runs
    /// clean: the regression half of fuzzing, run by `cargo test --workspace`.
    #[test]
    fn corpus_replays_clean() {
        for t in targets() {
            let seeds = seeds(t).unwrap_or_else(|e| panic!("seeds of {}: {e}", t.name));
            assert!(seeds.len() >= 3, "{} has {} seeds", t.name, seeds.len());
            for (path, data) in seeds {
                let r = std::panic::catch_unwind(|| (t.run)(&data));
                assert!(r.is_ok(), "{} panics on {}", t.name, path.display());
            }
        }
    }

    /// The mutator is deterministic for a seed (a crash that aborts the process is found again
    /// by replaying the same seed) and keeps inputs within the target's bound.
    #[test]
    fn mutation_is_deterministic_and_bounded() {
        let t = target("jsonrpc").unwrap();
        let corpus = vec![br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec()];
        let run = |seed| {
            let mut rng = mutate::Rng::new(seed);
            (0..2000).map(|_| mutate::mutate(&mut rng, &corpus[0], &corpus, t)).collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        assert!(a.iter().all(|i| i.len() <= t.max_len));
        assert!(a.iter().any(|i| i.len() > corpus[0].len()) && a.iter().any(|i| i.len() < corpus[0].len()));
    }

    #[test]
    fn outcome_ignores_digits_and_quoted_values() {
        let text = |s: &str| {
            let mut o = targets::Outcome::new();
            o.add_text(s);
            o.finish()
        };
        assert_eq!(
            text("unknown field `lisen`, expected one of `listen` at line 4"),
            text("unknown field `x y` at line 9")
        );
        assert_eq!(text("IP 10.0.0.1 refused"), text("IP 2001:db8::1 refused"));
        assert_eq!(
            text("invalid type: string \"a b\", expected u64"),
            text("invalid type: string \"c\", expected u64")
        );
        assert_ne!(
            text("invalid type: string \"a\", expected u64"),
            text("invalid type: string \"a\", expected a map")
        );
        let field = |s: &str| {
            let mut o = targets::Outcome::new();
            o.add_field(s, &[b"apps:", b"url: ", b"name: ", b"tiers:"]);
            o.finish()
        };
        assert_eq!(field("apps[3].url"), field("apps[12].url"));
        assert_ne!(field("apps[3].url"), field("apps[3].name"));
        assert_eq!(field("tiers.gold"), field("tiers.silver"));
        assert_eq!(field("apps[0].url"), field("apps[1].name.url"));
        assert_ne!(field("apps[0].url"), field("apps[0].name"));
    }
}
