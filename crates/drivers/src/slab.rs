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
    /// The slot's index, kept in 32 bits (a worker never holds 2^32 connections) so that
    /// a token, and an `Option` of one, stays small in every connection's state.
    slot: u32,
    pub(crate) generation: u32,
}

impl Token {
    /// A token for slot `index` at `generation`.
    pub(crate) fn new(index: usize, generation: u32) -> Token {
        Token {
            slot: index as u32,
            generation,
        }
    }

    /// The slot's index.
    #[inline]
    pub(crate) fn index(self) -> usize {
        self.slot as usize
    }

    /// Packs the token with a `kind` (what the event is about, the loop's to define) into one
    /// u64: kind in the top 8 bits, then 24 bits of generation, then 32 bits of index.
    pub(crate) fn pack(self, kind: u8) -> u64 {
        ((kind as u64) << 56)
            | (((self.generation & GENERATION_MASK) as u64) << 32)
            | self.slot as u64
    }

    /// The kind and token [`Token::pack`] packed.
    pub(crate) fn unpack(data: u64) -> (u8, Token) {
        let token = Token {
            slot: (data & 0xffff_ffff) as u32,
            generation: ((data >> 32) as u32) & GENERATION_MASK,
        };
        ((data >> 56) as u8, token)
    }
}

/// Slots holding `T`s, reused lowest-freed-last, each with its generation.
///
/// The names ([`SlotIds`]: generations and free indexes) are kept apart from the values, so
/// that a slot can be reserved while values are borrowed: a handler call that opens a
/// connection names it at once ([`SlotIds::reserve`]), and the loop puts the connection in
/// the reserved slot after the call ([`Slab::insert_at`]).
pub(crate) struct Slab<T> {
    values: Vec<Option<T>>,
    ids: SlotIds,
    /// Slots holding a value.
    live: usize,
}

/// The generation of every slot and the free ones, apart from the values.
#[derive(Default)]
pub(crate) struct SlotIds {
    generations: Vec<u32>,
    free: Vec<usize>,
}

impl SlotIds {
    /// Takes a free slot (or a new one) for a value to be inserted later with
    /// [`Slab::insert_at`]: nothing else is given the slot meanwhile.
    pub(crate) fn reserve(&mut self) -> Token {
        let index = self.free.pop().unwrap_or_else(|| {
            self.generations.push(0);
            self.generations.len() - 1
        });
        Token::new(index, self.generations[index])
    }

    /// Gives back a reserved slot that will not be filled.
    pub(crate) fn unreserve(&mut self, token: Token) {
        self.retire(token.index());
    }

    /// Whether `token` names slot `token.index()` as it is now (filled or reserved).
    #[inline]
    pub(crate) fn is_current(&self, token: Token) -> bool {
        self.generations.get(token.index()) == Some(&token.generation)
    }

    /// Bumps the slot's generation and frees it.
    fn retire(&mut self, index: usize) {
        let generation = &mut self.generations[index];
        *generation = (*generation + 1) & GENERATION_MASK;
        self.free.push(index);
    }
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            values: Vec::new(),
            ids: SlotIds::default(),
            live: 0,
        }
    }
}

impl<T> Slab<T> {
    /// Reserves a slot (see [`SlotIds::reserve`]).
    #[inline]
    pub(crate) fn reserve(&mut self) -> Token {
        self.ids.reserve()
    }

    /// Gives back a reserved slot that will not be filled.
    #[inline]
    pub(crate) fn unreserve(&mut self, token: Token) {
        self.ids.unreserve(token);
    }

    /// Puts `value` in a slot reserved for it.
    #[inline]
    pub(crate) fn insert_at(&mut self, token: Token, value: T) {
        debug_assert!(self.ids.is_current(token), "a reserved slot");
        if self.values.len() <= token.index() {
            self.values.resize_with(token.index() + 1, || None);
        }
        let slot = &mut self.values[token.index()];
        debug_assert!(slot.is_none(), "a reserved slot is empty");
        *slot = Some(value);
        self.live += 1;
    }

    /// Puts `value` in a free slot (reusing the most recently freed first).
    #[cfg(test)]
    pub(crate) fn insert(&mut self, value: T) -> Token {
        let token = self.reserve();
        self.insert_at(token, value);
        token
    }

    /// The token of slot `index` as it is now.
    #[inline]
    pub(crate) fn token(&self, index: usize) -> Token {
        Token::new(index, self.ids.generations[index])
    }

    /// The value `token` names, if its slot still holds the value it was made for.
    #[inline]
    pub(crate) fn get_mut(&mut self, token: Token) -> Option<&mut T> {
        if !self.ids.is_current(token) {
            return None;
        }
        self.values.get_mut(token.index())?.as_mut()
    }

    /// The value in slot `index`, whatever its generation.
    #[inline]
    pub(crate) fn at(&mut self, index: usize) -> Option<&mut T> {
        self.values.get_mut(index)?.as_mut()
    }

    /// The values in two different slots at once.
    pub(crate) fn pair(&mut self, a: usize, b: usize) -> Option<(&mut T, &mut T)> {
        if a == b || a.max(b) >= self.values.len() {
            return None;
        }
        let (low, high) = self.values.split_at_mut(a.max(b));
        let (first, second) = (low[a.min(b)].as_mut()?, high[0].as_mut()?);
        Some(if a < b {
            (first, second)
        } else {
            (second, first)
        })
    }

    /// Empties slot `index` and frees it under a new generation.
    #[inline]
    pub(crate) fn remove(&mut self, index: usize) -> Option<T> {
        let value = self.values.get_mut(index)?.take()?;
        self.ids.retire(index);
        self.live -= 1;
        Some(value)
    }

    /// The number of slots there have been (filled, reserved or free): indexes run below it.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.ids.generations.len()
    }

    /// The values, in slot order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.values.iter().filter_map(Option::as_ref)
    }

    /// The values, in slot order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.values.iter_mut().filter_map(Option::as_mut)
    }

    /// The current generation of slot `index`.
    #[inline]
    pub(crate) fn generation(&self, index: usize) -> u32 {
        self.ids.generations[index]
    }

    /// Slots holding a value.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// The values seen through a raw pointer, and the slot names apart, for a handler call
    /// that borrows one slot's value and may reach others (see `Reach`).
    pub(crate) fn split(&mut self) -> (RawSlots<'_, T>, &mut SlotIds) {
        let raw = RawSlots {
            base: self.values.as_mut_ptr(),
            len: self.values.len(),
            _values: std::marker::PhantomData,
        };
        (raw, &mut self.ids)
    }
}

/// The values of a [`Slab`] as a raw pointer, for borrowing several slots' values at once
/// while the slab itself stays untouched (no value is added or removed meanwhile, so the
/// pointer stays valid for the borrow it came from).
pub(crate) struct RawSlots<'a, T> {
    base: *mut Option<T>,
    len: usize,
    _values: std::marker::PhantomData<&'a mut Vec<Option<T>>>,
}

impl<'a, T> RawSlots<'a, T> {
    /// The value in slot `index`.
    ///
    /// # Safety
    /// No other live reference may point into the same slot's value: each slot is borrowed
    /// at most once at a time through this (or any other) path.
    #[inline]
    pub(crate) unsafe fn get(&self, index: usize) -> Option<&'a mut T> {
        if index >= self.len {
            return None;
        }
        // SAFETY: `index` is within the vector this pointer came from, which is neither
        // resized nor otherwise borrowed for 'a; the caller guarantees the slot is not
        // borrowed twice.
        unsafe { (*self.base.add(index)).as_mut() }
    }

    /// The pointer and length, for a type-erased view (see `Reach`).
    pub(crate) fn into_raw(self) -> (*mut Option<T>, usize) {
        (self.base, self.len)
    }
}

impl<T> std::ops::Index<usize> for Slab<T> {
    type Output = T;

    /// The value in slot `index`; panics if the slot is empty (a bug in the loop).
    #[inline]
    fn index(&self, index: usize) -> &T {
        self.values[index].as_ref().expect("a live slot")
    }
}

impl<T> std::ops::IndexMut<usize> for Slab<T> {
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut T {
        self.values[index].as_mut().expect("a live slot")
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
            let token = Token::new(index, generation);
            assert_eq!(Token::unpack(token.pack(kind)), (kind, token));
        }
    }

    #[test]
    fn a_reused_slot_does_not_answer_to_an_old_token() {
        let mut slab = Slab::default();
        let first = slab.insert("a");
        assert_eq!(slab.get_mut(first), Some(&mut "a"));
        assert_eq!(slab.remove(first.index()), Some("a"));
        assert_eq!(slab.get_mut(first), None);
        let second = slab.insert("b");
        assert_eq!(second.index(), first.index());
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
            slab.remove(token.index());
        }
        slab.ids.generations[0] = GENERATION_MASK;
        let token = slab.insert(());
        slab.remove(token.index());
        let wrapped = slab.insert(());
        assert_eq!(wrapped.generation, 0);
        let (_, unpacked) = Token::unpack(wrapped.pack(1));
        assert_eq!(slab.get_mut(unpacked), Some(&mut ()));
    }
}

#[cfg(test)]
mod reservation_tests {
    use super::*;

    #[test]
    fn a_reserved_slot_is_given_to_nothing_else_until_filled() {
        let mut slab = Slab::default();
        let reserved = slab.reserve();
        let other = slab.insert("other");
        assert_ne!(other.index(), reserved.index());
        assert_eq!(slab.get_mut(reserved), None);
        slab.insert_at(reserved, "reserved");
        assert_eq!(slab.get_mut(reserved), Some(&mut "reserved"));
        assert_eq!(slab.len(), 2);
    }

    #[test]
    fn an_unreserved_slot_is_free_under_a_new_generation() {
        let mut slab: Slab<&str> = Slab::default();
        let reserved = slab.reserve();
        slab.ids.unreserve(reserved);
        let next = slab.insert("next");
        assert_eq!(next.index(), reserved.index());
        assert_ne!(next.generation, reserved.generation);
    }

    #[test]
    fn a_pair_is_two_different_slots_in_the_order_asked() {
        let mut slab = Slab::default();
        let a = slab.insert(1);
        let b = slab.insert(2);
        let (x, y) = slab.pair(b.index(), a.index()).expect("two live slots");
        assert_eq!((*x, *y), (2, 1));
        assert!(slab.pair(a.index(), a.index()).is_none());
    }
}
