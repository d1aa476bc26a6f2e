//! Input generation: a seeded PRNG and libFuzzer-style byte mutations, stacked, with the
//! target's dictionary of grammar tokens. Deterministic for a seed and a corpus, so a run that
//! ended in an abort (allocation bound, stack overflow) can be replayed to find its input.

use crate::Target;

/// SplitMix64: small, fast, and the same sequence on every platform.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Small numbers far more often than large ones (lengths, counts).
    fn small(&mut self, max: usize) -> usize {
        let bits = self.below(usize::BITS as usize - max.leading_zeros() as usize + 1);
        self.below((1usize << bits).min(max).max(1)) + usize::from(max > 0)
    }
}

/// Values that break number handling, written as text (every target reads text).
const NUMBERS: &[&[u8]] = &[
    b"0",
    b"-0",
    b"-1",
    b"1e309",
    b"0.1",
    b"4294967296",
    b"9007199254740993",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"99999999999999999999999999",
    b"1e-400",
];

/// Bytes that matter to the text grammars (JSON, YAML, SSE, headers).
const ASCII: &[u8] = b" \t\r\n\"'\\,:;{}[]<>!&*|#%@`-_./?=0123456789aez\0";

/// One new input from `input`: one to eight stacked mutations, the result cut to `max_len`.
pub fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>], target: &Target) -> Vec<u8> {
    let mut data = input.to_vec();
    for _ in 0..=rng.below(8) {
        mutate_once(rng, &mut data, corpus, target);
    }
    data.truncate(target.max_len);
    data
}

fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, corpus: &[Vec<u8>], target: &Target) {
    let len = data.len();
    let pos = |rng: &mut Rng| rng.below(len + 1);
    match rng.below(13) {
        // Flip a bit.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Set a byte: ASCII most of the time (the grammars are text), any byte otherwise.
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = if rng.below(4) == 0 { rng.next_u64() as u8 } else { ASCII[rng.below(ASCII.len())] };
        }
        // Insert a few random bytes.
        2 => {
            let at = pos(rng);
            let n = rng.small(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            data.splice(at..at, bytes);
        }
        // Delete a range.
        3 if len > 0 => {
            let at = rng.below(len);
            let n = rng.small(len - at);
            data.drain(at..at + n);
        }
        // Copy a range of the input elsewhere in it.
        4 if len > 0 => {
            let from = rng.below(len);
            let n = rng.small(len - from);
            let chunk = data[from..from + n].to_vec();
            let at = pos(rng);
            data.splice(at..at, chunk);
        }
        // Insert a dictionary token.
        5 | 6 => {
            let token = target.dictionary[rng.below(target.dictionary.len())];
            let at = pos(rng);
            data.splice(at..at, token.iter().copied());
        }
        // Replace a range with a dictionary token.
        7 if len > 0 => {
            let token = target.dictionary[rng.below(target.dictionary.len())];
            let at = rng.below(len);
            let n = rng.small(len - at);
            data.splice(at..at + n, token.iter().copied());
        }
        // Splice: this input's head, another corpus entry's tail.
        8 if !corpus.is_empty() => {
            let other = &corpus[rng.below(corpus.len())];
            let cut = pos(rng);
            let from = rng.below(other.len() + 1);
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        // Replace a run of digits with a troublesome number.
        9 if len > 0 => {
            let start = rng.below(len);
            match data[start..].iter().position(u8::is_ascii_digit) {
                Some(d) => {
                    let a = start + d;
                    let b = a + data[a..].iter().take_while(|c| c.is_ascii_digit()).count();
                    data.splice(a..b, NUMBERS[rng.below(NUMBERS.len())].iter().copied());
                }
                None => data.splice(start..start, NUMBERS[rng.below(NUMBERS.len())].iter().copied()).for_each(drop),
            }
        }
        // Repeat a short chunk many times: deep nesting, long lines, many members.
        10 if len > 0 => {
            let from = rng.below(len);
            let n = rng.small((len - from).min(16));
            let chunk = data[from..from + n].to_vec();
            let most = if rng.below(8) == 0 { 4096 } else { 64 };
            let times = rng.small(most);
            let at = pos(rng);
            let repeated: Vec<u8> = chunk.iter().copied().cycle().take(chunk.len() * times).collect();
            data.splice(at..at, repeated);
        }
        // Cut the tail.
        11 if len > 0 => data.truncate(rng.below(len)),
        // Swap two bytes (reorders tokens and line endings).
        12 if len > 1 => {
            let (a, b) = (rng.below(len), rng.below(len));
            data.swap(a, b);
        }
        // Empty input: start from a token.
        _ => {
            let token = target.dictionary[rng.below(target.dictionary.len())];
            let at = pos(rng);
            data.splice(at..at, token.iter().copied());
        }
    }
}
