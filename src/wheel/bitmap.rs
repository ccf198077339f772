//! Occupancy bitmap of one wheel level: one bit per bucket plus a summary bit per 64-bucket
//! word, so finding the next occupied bucket reads at most `len / 4096 + 2` words.

#[derive(Debug)]
pub(super) struct Bitmap {
    words: Box<[u64]>,
    summary: Box<[u64]>,
}

impl Bitmap {
    pub(super) fn new(bits: usize) -> Self {
        let words = bits.div_ceil(64);
        Bitmap {
            words: vec![0; words].into_boxed_slice(),
            summary: vec![0; words.div_ceil(64)].into_boxed_slice(),
        }
    }

    pub(super) fn set(&mut self, bit: usize) {
        let w = bit / 64;
        self.words[w] |= 1 << (bit % 64);
        self.summary[w / 64] |= 1 << (w % 64);
    }

    pub(super) fn clear(&mut self, bit: usize) {
        let w = bit / 64;
        self.words[w] &= !(1 << (bit % 64));
        if self.words[w] == 0 {
            self.summary[w / 64] &= !(1 << (w % 64));
        }
    }

    /// The first set bit at or after `from`, without wrapping.
    pub(super) fn next_set(&self, from: usize) -> Option<usize> {
        let w = from / 64;
        let first = *self.words.get(w)? & (u64::MAX << (from % 64));
        if first != 0 {
            return Some(w * 64 + first.trailing_zeros() as usize);
        }
        let w = self.next_word(w + 1)?;
        Some(w * 64 + self.words[w].trailing_zeros() as usize)
    }

    /// The first non-empty word at or after `from`.
    fn next_word(&self, from: usize) -> Option<usize> {
        let mut s = from / 64;
        let mut mask = u64::MAX.checked_shl((from % 64) as u32).unwrap_or(0);
        while let Some(&word) = self.summary.get(s) {
            let bits = word & mask;
            if bits != 0 {
                return Some(s * 64 + bits.trailing_zeros() as usize);
            }
            s += 1;
            mask = u64::MAX;
        }
        None
    }
}
