//! Session ticket keys every serving process shares: made at start and rotated on a schedule,
//! in memory that preforked children map too and a reloaded server inherits; or read from
//! files, for nodes that share them.
//!
//! A ticket is `name (16) | nonce (12) | AES-256-GCM(state) | tag (16)`, the key's name as
//! the associated data. Rotating keys live in three slots of a shared block: the current key
//! encrypts, the current and the previous one decrypt, so a ticket is accepted for up to two
//! periods. Each slot is written under a sequence counter (a seqlock): a reader copies the key
//! and checks the counter did not move, so a rotation by another process never tears a key.

use std::fs;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::{hkdf, rand};
use fastpath_sys::{ProcessShared, SharedMapping};
use rustls::server::ProducesTickets;

use crate::error::TlsError;

const NAME_LEN: usize = 16;
const KEY_LEN: usize = 32;
const TAG_LEN: usize = 16;
/// Marks a block laid out as this build lays it out; a block from another layout (a binary
/// upgrade that changed it) is not used.
const MAGIC: u64 = u64::from_be_bytes(*b"fpTKT\0\0\x01");
/// A rotation that has not finished after this long was cut short (its process died); another
/// process may do it.
const ROTATION_STALE_SECS: u64 = 10;

/// Where a listener's ticket keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketKeys {
    /// Made at start, replaced every period; a ticket is accepted for up to two periods.
    Rotating {
        /// How long a key encrypts new tickets.
        every: Duration,
    },
    /// Read from files of 48 or 80 random bytes each (`openssl rand 80`, the format of
    /// nginx's `ssl_session_ticket_key`): the first encrypts, all decrypt. Nodes that share
    /// the files resume each other's sessions; they are rotated by replacing the files and
    /// reloading.
    Files(Vec<PathBuf>),
    /// No tickets: sessions resume only from the serving process's own cache.
    Off,
}

impl Default for TicketKeys {
    fn default() -> Self {
        TicketKeys::Rotating {
            every: Duration::from_secs(12 * 3600),
        }
    }
}

/// One key: its name (sent in the clear at the start of each ticket) and the AEAD key.
struct Key {
    name: [u8; NAME_LEN],
    sealing: LessSafeKey,
}

impl Key {
    fn new(name: [u8; NAME_LEN], secret: &[u8; KEY_LEN]) -> Key {
        let unbound = UnboundKey::new(&AES_256_GCM, secret).expect("a 32-byte AES-256 key");
        Key {
            name,
            sealing: LessSafeKey::new(unbound),
        }
    }

    fn seal(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::fill(&mut nonce).ok()?;
        let mut ticket = Vec::with_capacity(NAME_LEN + NONCE_LEN + plain.len() + TAG_LEN);
        ticket.extend_from_slice(&self.name);
        ticket.extend_from_slice(&nonce);
        ticket.extend_from_slice(plain);
        let mut sealed = ticket.split_off(NAME_LEN + NONCE_LEN);
        self.sealing
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&self.name),
                &mut sealed,
            )
            .ok()?;
        ticket.extend_from_slice(&sealed);
        Some(ticket)
    }

    /// The state in `ticket` if this key sealed it.
    fn open(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let (name, rest) = ticket.split_at_checked(NAME_LEN)?;
        if name != self.name {
            return None;
        }
        let (nonce, sealed) = rest.split_at_checked(NONCE_LEN)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut sealed = sealed.to_vec();
        let plain_len = self
            .sealing
            .open_in_place(nonce, Aad::from(&self.name), &mut sealed)
            .ok()?
            .len();
        sealed.truncate(plain_len);
        Some(sealed)
    }
}

/// One key in shared memory: `words` hold the name then the secret.
#[repr(C)]
#[derive(Default)]
struct KeySlot {
    /// Odd while the slot is being written.
    sequence: AtomicU64,
    /// When the key was made, in seconds since the epoch.
    created: AtomicU64,
    words: [AtomicU64; (NAME_LEN + KEY_LEN) / 8],
}

#[repr(C)]
#[derive(Default)]
struct KeyBlock {
    magic: AtomicU64,
    /// The current key is in `slots[generation % 3]`, the previous one before it.
    generation: AtomicU64,
    /// When a rotation began (0: none under way).
    rotating_since: AtomicU64,
    slots: [KeySlot; 3],
}

// SAFETY: atomics only, valid at zero and at any value; no pointers, no drop.
unsafe impl ProcessShared for KeySlot {}
// SAFETY: as above.
unsafe impl ProcessShared for KeyBlock {}

/// What a slot held when read: the time it was made and its key material.
struct SlotCopy {
    created: u64,
    name: [u8; NAME_LEN],
    secret: [u8; KEY_LEN],
}

impl KeySlot {
    fn write(&self, created: u64, name: &[u8; NAME_LEN], secret: &[u8; KEY_LEN]) {
        self.sequence.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.created.store(created, Ordering::Relaxed);
        let bytes = name
            .iter()
            .chain(secret.iter())
            .copied()
            .collect::<Vec<u8>>();
        for (word, chunk) in self.words.iter().zip(bytes.chunks_exact(8)) {
            let value = u64::from_ne_bytes(chunk.try_into().expect("chunks of 8"));
            word.store(value, Ordering::Relaxed);
        }
        self.sequence.fetch_add(1, Ordering::Release);
    }

    fn read(&self) -> SlotCopy {
        loop {
            let before = self.sequence.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let created = self.created.load(Ordering::Relaxed);
            let mut bytes = [0u8; NAME_LEN + KEY_LEN];
            for (chunk, word) in bytes.chunks_exact_mut(8).zip(&self.words) {
                chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
            }
            fence(Ordering::Acquire);
            if self.sequence.load(Ordering::Relaxed) == before {
                let (name, secret) = bytes.split_at(NAME_LEN);
                return SlotCopy {
                    created,
                    name: name.try_into().expect("NAME_LEN bytes"),
                    secret: secret.try_into().expect("KEY_LEN bytes"),
                };
            }
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

fn random<const N: usize>() -> Option<[u8; N]> {
    let mut bytes = [0u8; N];
    rand::fill(&mut bytes).ok()?;
    Some(bytes)
}

enum Store {
    Rotating {
        block: SharedMapping<KeyBlock>,
        file: OwnedFd,
        every: u64,
    },
    Fixed(Vec<Key>),
}

/// The ticket keys of a server's TLS listeners, as rustls's ticket producer.
pub struct SessionTickets {
    store: Store,
}

impl std::fmt::Debug for SessionTickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.store {
            Store::Rotating { every, .. } => format!("rotating every {every} s"),
            Store::Fixed(keys) => format!("{} keys from files", keys.len()),
        };
        f.debug_struct("SessionTickets")
            .field("keys", &what)
            .finish()
    }
}

/// How the keys were come by, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketOrigin {
    /// Made now.
    Made,
    /// Those of the server this one replaces.
    Inherited,
    /// Made now: the ones handed over could not be used, for the reason given.
    MadeInstead(String),
    /// Read from the files.
    Files,
}

impl SessionTickets {
    /// The keys `source` asks for: a rotating set inherited from `handed` (the memory file of
    /// the server this one replaces) when there is one, else made now. `None` for no tickets.
    pub fn new(
        source: &TicketKeys,
        handed: Option<OwnedFd>,
    ) -> Result<Option<(SessionTickets, TicketOrigin)>, TlsError> {
        match source {
            TicketKeys::Off => Ok(None),
            TicketKeys::Files(paths) => {
                let keys = paths.iter().map(read_key_file).collect::<Result<_, _>>()?;
                let tickets = SessionTickets {
                    store: Store::Fixed(keys),
                };
                Ok(Some((tickets, TicketOrigin::Files)))
            }
            TicketKeys::Rotating { every } => {
                let every = every.as_secs().max(1);
                let (block, file, origin) = match handed.map(inherit) {
                    Some(Ok((block, file))) => (block, file, TicketOrigin::Inherited),
                    Some(Err(why)) => {
                        let (block, file) = make_block()?;
                        (block, file, TicketOrigin::MadeInstead(why))
                    }
                    None => {
                        let (block, file) = make_block()?;
                        (block, file, TicketOrigin::Made)
                    }
                };
                let tickets = SessionTickets {
                    store: Store::Rotating { block, file, every },
                };
                Ok(Some((tickets, origin)))
            }
        }
    }

    /// The memory file holding rotating keys, to hand to the server that replaces this one.
    pub fn handover_file(&self) -> Option<BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match &self.store {
            Store::Rotating { file, .. } => Some(file.as_fd()),
            Store::Fixed(_) => None,
        }
    }

    fn seal_at(&self, plain: &[u8], now: u64) -> Option<Vec<u8>> {
        match &self.store {
            Store::Fixed(keys) => keys.first()?.seal(plain),
            Store::Rotating { block, every, .. } => current_key(&block[0], *every, now).seal(plain),
        }
    }

    fn open_at(&self, ticket: &[u8], now: u64) -> Option<Vec<u8>> {
        match &self.store {
            Store::Fixed(keys) => keys.iter().find_map(|key| key.open(ticket)),
            Store::Rotating { block, every, .. } => {
                let block = &block[0];
                let generation = block.generation.load(Ordering::Acquire);
                [Some(generation), generation.checked_sub(1)]
                    .into_iter()
                    .flatten()
                    .map(|g| block.slots[(g % 3) as usize].read())
                    .filter(|slot| now < slot.created.saturating_add(every.saturating_mul(2)))
                    .filter(|slot| ticket.get(..NAME_LEN) == Some(&slot.name[..]))
                    .find_map(|slot| Key::new(slot.name, &slot.secret).open(ticket))
            }
        }
    }
}

/// The key that encrypts at `now`, rotating first if it is due.
fn current_key(block: &KeyBlock, every: u64, now: u64) -> Key {
    let generation = block.generation.load(Ordering::Acquire);
    let mut slot = block.slots[(generation % 3) as usize].read();
    if now >= slot.created.saturating_add(every) {
        rotate(block, generation, now);
        let generation = block.generation.load(Ordering::Acquire);
        slot = block.slots[(generation % 3) as usize].read();
    }
    Key::new(slot.name, &slot.secret)
}

fn make_block() -> Result<(SharedMapping<KeyBlock>, OwnedFd), TlsError> {
    let (block, file) = SharedMapping::<KeyBlock>::new_in_file(1, c"fastpath-ticket-keys")
        .map_err(|e| TlsError::general(format!("session ticket keys: {e}")))?;
    let (name, secret) = random::<NAME_LEN>()
        .zip(random::<KEY_LEN>())
        .ok_or_else(|| TlsError::general("session ticket keys: no random bytes"))?;
    block[0].slots[0].write(unix_now(), &name, &secret);
    block[0].generation.store(0, Ordering::Release);
    block[0].magic.store(MAGIC, Ordering::Release);
    Ok((block, file))
}

fn inherit(file: OwnedFd) -> Result<(SharedMapping<KeyBlock>, OwnedFd), String> {
    // SAFETY: the file came from the server this one replaces, which made it with
    // new_in_file for a KeyBlock; every bit pattern is a valid KeyBlock (atomic integers),
    // and the magic number below tells a block of another layout apart.
    let block = unsafe { SharedMapping::<KeyBlock>::map_file(&file, 1) }
        .map_err(|e| format!("the handed-over keys cannot be mapped: {e}"))?;
    if block[0].magic.load(Ordering::Acquire) != MAGIC {
        return Err("the handed-over keys are of another layout".into());
    }
    Ok((block, file))
}

/// Makes the next key unless another process is doing it (or did it since `seen`).
fn rotate(block: &KeyBlock, seen: u64, now: u64) {
    let since = block.rotating_since.load(Ordering::Acquire);
    if since != 0 && now.saturating_sub(since) < ROTATION_STALE_SECS {
        return;
    }
    if block
        .rotating_since
        .compare_exchange(since, now.max(1), Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    if block.generation.load(Ordering::Acquire) == seen {
        if let Some((name, secret)) = random::<NAME_LEN>().zip(random::<KEY_LEN>()) {
            block.slots[((seen + 1) % 3) as usize].write(now, &name, &secret);
            block.generation.store(seen + 1, Ordering::Release);
        }
    }
    block.rotating_since.store(0, Ordering::Release);
}

/// A key file: 48 or 80 random bytes, the first 16 naming the key; the AEAD key is derived
/// from the rest with HKDF-SHA256, so both of nginx's sizes make a 256-bit key.
fn read_key_file(path: &PathBuf) -> Result<Key, TlsError> {
    let bytes = fs::read(path).map_err(|e| TlsError::new(path, format!("cannot read: {e}")))?;
    if bytes.len() != 48 && bytes.len() != 80 {
        return Err(TlsError::new(
            path,
            format!(
                "a session ticket key file holds 48 or 80 bytes (`openssl rand 80`), not {}",
                bytes.len()
            ),
        ));
    }
    let (name, material) = bytes.split_at(NAME_LEN);
    let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, b"fastpath session ticket key");
    let mut secret = [0u8; KEY_LEN];
    salt.extract(material)
        .expand(&[], hkdf::HKDF_SHA256)
        .and_then(|okm| okm.fill(&mut secret))
        .map_err(|_| TlsError::new(path, "cannot derive a key"))?;
    Ok(Key::new(name.try_into().expect("NAME_LEN bytes"), &secret))
}

impl ProducesTickets for SessionTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        match &self.store {
            Store::Rotating { every, .. } => u32::try_from(*every).unwrap_or(u32::MAX),
            // Files are replaced by hand; a day is what nginx tells clients too.
            Store::Fixed(_) => 24 * 3600,
        }
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.seal_at(plain, unix_now())
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        self.open_at(ticket, unix_now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn rotating(every: u64, handed: Option<OwnedFd>) -> (SessionTickets, TicketOrigin) {
        let source = TicketKeys::Rotating {
            every: Duration::from_secs(every),
        };
        SessionTickets::new(&source, handed).unwrap().unwrap()
    }

    fn handed(tickets: &SessionTickets) -> OwnedFd {
        tickets
            .handover_file()
            .unwrap()
            .try_clone_to_owned()
            .unwrap()
    }

    #[test]
    fn a_ticket_opens_to_what_was_sealed_and_not_once_changed() {
        let (tickets, origin) = rotating(3600, None);
        assert_eq!(origin, TicketOrigin::Made);
        let now = unix_now();
        let ticket = tickets.seal_at(b"session state", now).unwrap();
        assert_eq!(ticket.len(), NAME_LEN + NONCE_LEN + 13 + TAG_LEN);
        assert_eq!(tickets.open_at(&ticket, now).unwrap(), b"session state");
        for at in [0, NAME_LEN, NAME_LEN + NONCE_LEN, ticket.len() - 1] {
            let mut changed = ticket.clone();
            changed[at] ^= 1;
            assert_eq!(tickets.open_at(&changed, now), None, "byte {at} changed");
        }
        assert_eq!(tickets.open_at(&ticket[..20], now), None);
        assert_eq!(tickets.open_at(&[], now), None);
        let (others, _) = rotating(3600, None);
        assert_eq!(others.open_at(&ticket, now), None, "another server's keys");
    }

    #[test]
    fn keys_rotate_and_a_ticket_lasts_two_periods_at_most() {
        let (tickets, _) = rotating(100, None);
        let start = unix_now();
        let first = tickets.seal_at(b"first", start).unwrap();
        // Due: the next seal makes a new key; the first still opens as the previous one.
        let second = tickets.seal_at(b"second", start + 100).unwrap();
        assert_ne!(first[..NAME_LEN], second[..NAME_LEN]);
        assert_eq!(tickets.open_at(&first, start + 150).unwrap(), b"first");
        // Two periods after its key was made, a ticket is refused even before a rotation.
        assert_eq!(tickets.open_at(&first, start + 200), None);
        // A later rotation leaves the first key out altogether.
        let third = tickets.seal_at(b"third", start + 200).unwrap();
        assert_eq!(tickets.open_at(&second, start + 250).unwrap(), b"second");
        assert_eq!(tickets.open_at(&third, start + 250).unwrap(), b"third");
        assert_eq!(tickets.open_at(&first, start + 150), None);
    }

    #[test]
    fn a_successor_shares_the_keys_and_their_rotation() {
        let (first, _) = rotating(100, None);
        let (second, origin) = rotating(100, Some(handed(&first)));
        assert_eq!(origin, TicketOrigin::Inherited);
        let now = unix_now();
        let ticket = first.seal_at(b"state", now).unwrap();
        assert_eq!(second.open_at(&ticket, now).unwrap(), b"state");
        // A rotation by one is the other's too.
        let after = second.seal_at(b"later", now + 100).unwrap();
        assert_eq!(first.open_at(&after, now + 100).unwrap(), b"later");
        let again = first.seal_at(b"again", now + 101).unwrap();
        assert_eq!(
            again[..NAME_LEN],
            after[..NAME_LEN],
            "rotated once, not twice"
        );
    }

    #[test]
    fn a_handed_file_of_another_shape_gives_new_keys() {
        let (wrong, _) = SharedMapping::<AtomicU64>::new_in_file(3, c"other").unwrap();
        drop(wrong);
        let (made, file) = SharedMapping::<KeyBlock>::new_in_file(1, c"zeroed").unwrap();
        drop(made);
        let (_, origin) = rotating(100, Some(file));
        assert!(matches!(origin, TicketOrigin::MadeInstead(ref why) if why.contains("layout")));
    }

    #[test]
    fn servers_reading_the_same_files_open_each_others_tickets() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            fs::File::create(&path).unwrap().write_all(bytes).unwrap();
            path
        };
        let current = write("current.key", &[7u8; 80]);
        let previous = write("previous.key", &[9u8; 48]);
        let source = TicketKeys::Files(vec![current.clone(), previous.clone()]);
        let (node_a, origin) = SessionTickets::new(&source, None).unwrap().unwrap();
        assert_eq!(origin, TicketOrigin::Files);
        assert!(node_a.handover_file().is_none());
        let (node_b, _) = SessionTickets::new(&source, None).unwrap().unwrap();
        let ticket = node_a.seal_at(b"state", 0).unwrap();
        assert_eq!(ticket[..NAME_LEN], [7u8; NAME_LEN]);
        assert_eq!(node_b.open_at(&ticket, 0).unwrap(), b"state");
        // A node that moved on to a new key still opens tickets of the old one.
        let newer = write("newer.key", &[5u8; 80]);
        let moved = TicketKeys::Files(vec![newer, current]);
        let (node_c, _) = SessionTickets::new(&moved, None).unwrap().unwrap();
        assert_eq!(node_c.open_at(&ticket, 0).unwrap(), b"state");
        assert_eq!(
            node_c.seal_at(b"x", 0).unwrap()[..NAME_LEN],
            [5u8; NAME_LEN]
        );

        let short = write("short.key", &[1u8; 32]);
        let err = SessionTickets::new(&TicketKeys::Files(vec![short]), None).unwrap_err();
        assert!(err.to_string().contains("48 or 80 bytes"), "{err}");
        let missing = TicketKeys::Files(vec![dir.path().join("none.key")]);
        let err = SessionTickets::new(&missing, None).unwrap_err();
        assert!(err.to_string().contains("cannot read"), "{err}");
        assert!(SessionTickets::new(&TicketKeys::Off, None)
            .unwrap()
            .is_none());
    }
}
