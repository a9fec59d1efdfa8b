//! Connection slots named by index and generation, for every event loop.
//!
//! The kernel hands back a number with each event (an epoll token, io_uring user data). A
//! slot's index alone would be ambiguous once its connection has closed and the slot has been
//! reused, so the number also carries the slot's generation, bumped at each reuse: an event
//! for a connection that is gone names an old generation and is ignored.

/// Bits of a generation carried in a packed [`Token`]; generations wrap within them.
pub(crate) const GENERATION_BITS: u32 = 24;
const GENERATION_MASK: u32 = (1 << GENERATION_BITS) - 1;

/// A slot and the generation it had when the token was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Token {
    pub(crate) index: usize,
    pub(crate) generation: u32,
}

impl Token {
    /// Packs the token with a `kind` (what the event is about, the loop's to define) into one
    /// u64: kind in the top 8 bits, then 24 bits of generation, then 32 bits of index.
    pub(crate) fn pack(self, kind: u8) -> u64 {
        ((kind as u64) << 56)
            | (((self.generation & GENERATION_MASK) as u64) << 32)
            | (self.index as u32) as u64
    }

    /// The kind and token [`Token::pack`] packed.
    pub(crate) fn unpack(data: u64) -> (u8, Token) {
        let token = Token {
            index: (data & 0xffff_ffff) as usize,
            generation: ((data >> 32) as u32) & GENERATION_MASK,
        };
        ((data >> 56) as u8, token)
    }
}

/// Slots holding `T`s, reused lowest-freed-last, each with its generation.
pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free: Vec<usize>,
}

struct Entry<T> {
    generation: u32,
    value: Option<T>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// The token the next [`Slab::insert`] will return, for a value that must know its name
    /// before it exists.
    #[inline]
    pub(crate) fn next_token(&self) -> Token {
        let index = self.free.last().copied().unwrap_or(self.entries.len());
        let generation = self.entries.get(index).map_or(0, |entry| entry.generation);
        Token { index, generation }
    }

    /// Puts `value` in a free slot (or a new one) and names it.
    #[inline]
    pub(crate) fn insert(&mut self, value: T) -> Token {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.entries.push(Entry {
                    generation: 0,
                    value: None,
                });
                self.entries.len() - 1
            }
        };
        let entry = &mut self.entries[index];
        entry.value = Some(value);
        Token {
            index,
            generation: entry.generation,
        }
    }

    /// The token of the live slot `index`.
    #[inline]
    pub(crate) fn token(&self, index: usize) -> Token {
        Token {
            index,
            generation: self.entries[index].generation,
        }
    }

    /// The value `token` names, if its slot still holds the same generation.
    #[inline]
    pub(crate) fn get_mut(&mut self, token: Token) -> Option<&mut T> {
        let entry = self.entries.get_mut(token.index)?;
        if entry.generation != token.generation {
            return None;
        }
        entry.value.as_mut()
    }

    /// The value in slot `index`, whatever its generation.
    #[inline]
    pub(crate) fn at(&mut self, index: usize) -> Option<&mut T> {
        self.entries.get_mut(index)?.value.as_mut()
    }

    /// Empties slot `index` for reuse under a new generation, returning what it held.
    #[inline]
    pub(crate) fn remove(&mut self, index: usize) -> Option<T> {
        let entry = self.entries.get_mut(index)?;
        let value = entry.value.take()?;
        entry.generation = (entry.generation + 1) & GENERATION_MASK;
        self.free.push(index);
        Some(value)
    }

    /// One past the highest slot index ever used: sweeps walk `0..capacity()`.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// The live values.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().filter_map(|e| e.value.as_ref())
    }

    /// The live values, mutably.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries.iter_mut().filter_map(|e| e.value.as_mut())
    }

    /// The generation slot `index` has now.
    #[inline]
    pub(crate) fn generation(&self, index: usize) -> u32 {
        self.entries[index].generation
    }

    /// How many slots hold a value.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }
}

impl<T> std::ops::Index<usize> for Slab<T> {
    type Output = T;

    /// The value in slot `index`; panics if the slot is empty (a bug in the loop).
    #[inline]
    fn index(&self, index: usize) -> &T {
        self.entries[index].value.as_ref().expect("a live slot")
    }
}

impl<T> std::ops::IndexMut<usize> for Slab<T> {
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut T {
        self.entries[index].value.as_mut().expect("a live slot")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for (kind, index, generation) in [
            (0, 0, 0),
            (3, 12345, 7),
            (255, u32::MAX as usize, GENERATION_MASK),
        ] {
            let token = Token { index, generation };
            assert_eq!(Token::unpack(token.pack(kind)), (kind, token));
        }
    }

    #[test]
    fn a_reused_slot_does_not_answer_to_an_old_token() {
        let mut slab = Slab::default();
        let first = slab.insert("a");
        assert_eq!(slab.get_mut(first), Some(&mut "a"));
        assert_eq!(slab.remove(first.index), Some("a"));
        assert_eq!(slab.get_mut(first), None);
        let second = slab.insert("b");
        assert_eq!(second.index, first.index);
        assert_ne!(second.generation, first.generation);
        assert_eq!(slab.get_mut(first), None);
        assert_eq!(slab.get_mut(second), Some(&mut "b"));
        assert_eq!(slab.len(), 1);
    }

    #[test]
    fn generations_wrap_within_the_packed_bits() {
        let mut slab = Slab::default();
        for _ in 0..3 {
            let token = slab.insert(());
            slab.remove(token.index);
        }
        slab.entries[0].generation = GENERATION_MASK;
        let token = slab.insert(());
        slab.remove(token.index);
        let wrapped = slab.insert(());
        assert_eq!(wrapped.generation, 0);
        let (_, unpacked) = Token::unpack(wrapped.pack(1));
        assert_eq!(slab.get_mut(unpacked), Some(&mut ()));
    }
}
