//! The parsed commands. Every byte string borrows from the caller's buffer.

use std::borrow::Cow;

/// Which storage command a [`Store`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// `cas`: store only if the item's CAS value still equals [`Store::cas_unique`].
    Cas,
}

impl StoreMode {
    /// The command word as sent on the wire.
    pub fn name(self) -> &'static str {
        match self {
            StoreMode::Set => "set",
            StoreMode::Add => "add",
            StoreMode::Replace => "replace",
            StoreMode::Append => "append",
            StoreMode::Prepend => "prepend",
            StoreMode::Cas => "cas",
        }
    }
}

/// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]` and
/// `cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]`, with its data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store<'a> {
    pub mode: StoreMode,
    pub key: &'a [u8],
    /// The client's opaque 32-bit flags, returned with every read.
    pub flags: u32,
    /// As sent: 0 = never, ≤ 30 days = relative seconds, otherwise a Unix time; negative means
    /// already expired. Interpreting it is the store's job.
    pub exptime: i64,
    /// Only for [`StoreMode::Cas`]; 0 otherwise.
    pub cas_unique: u64,
    pub noreply: bool,
    /// The value, without the trailing `\r\n`; at most the item size limit.
    pub data: &'a [u8],
}

/// Which retrieval command a [`Get`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GetKind {
    Get,
    /// Like `get`, and every VALUE line carries the CAS value.
    Gets,
    /// Get and touch: `gat <exptime> <key>*`.
    Gat,
    /// `gat` with CAS values.
    Gats,
}

impl GetKind {
    pub fn name(self) -> &'static str {
        match self {
            GetKind::Get => "get",
            GetKind::Gets => "gets",
            GetKind::Gat => "gat",
            GetKind::Gats => "gats",
        }
    }

    /// Whether VALUE lines of the reply carry the CAS value.
    pub fn with_cas(self) -> bool {
        matches!(self, GetKind::Gets | GetKind::Gats)
    }
}

/// `get|gets <key>+` and `gat|gats <exptime> <key>+`. The reply is one VALUE block per hit, in
/// key order (a key asked twice is answered twice), then `END`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Get<'a> {
    pub kind: GetKind,
    /// `Some` for `gat`/`gats` only: the new exptime of every hit.
    pub exptime: Option<i64>,
    /// At least one key for `get`/`gets`; `gat`/`gats` may have none (memcached answers `END`).
    pub keys: Vec<&'a [u8]>,
}

/// `incr` or `decr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithOp {
    Incr,
    Decr,
}

/// The mode of a meta set (`M` flag); memcached's default is [`MetaMode::Set`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaMode {
    /// `ME`: add.
    Add,
    /// `MA`: append.
    Append,
    /// `MP`: prepend.
    Prepend,
    /// `MR`: replace.
    Replace,
    /// `MS`: set.
    Set,
}

impl MetaMode {
    /// The token letter (`E A P R S`).
    pub fn letter(self) -> u8 {
        match self {
            MetaMode::Add => b'E',
            MetaMode::Append => b'A',
            MetaMode::Prepend => b'P',
            MetaMode::Replace => b'R',
            MetaMode::Set => b'S',
        }
    }
}

/// One flag of a meta command as sent: its letter and the token after the letter (empty for
/// flags without a token). Kept in request order, because memcached returns flags in that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaFlag<'a> {
    pub letter: u8,
    pub token: &'a [u8],
}

/// The flags of a meta command, validated and decoded. `list` keeps them in request order (the
/// composers use it to return flags in that order); the other fields are the decoded values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    pub list: Vec<MetaFlag<'a>>,
    /// `b`: the key is base64; [`Meta::key`] is the encoded form.
    pub base64: bool,
    /// `v` (mg): return the value.
    pub return_value: bool,
    /// `k`: return the key.
    pub return_key: bool,
    /// `f` (mg): return the client flags.
    pub return_client_flags: bool,
    /// `t` (mg): return the remaining TTL (-1 = never expires).
    pub return_ttl: bool,
    /// `c`: return the CAS value.
    pub return_cas: bool,
    /// `s` (mg): return the value size.
    pub return_size: bool,
    /// `q`: quiet mode; see [`crate::MetaStatus::is_quiet_for`].
    pub quiet: bool,
    /// `O`: opaque token (≤ 32 bytes) echoed in the reply.
    pub opaque: Option<&'a [u8]>,
    /// `T`: new TTL (mg: touch; ms: exptime of the item; md: with `I`, the TTL of the stale item).
    pub ttl: Option<i64>,
    /// `F` (ms): client flags of the new item.
    pub client_flags: Option<u32>,
    /// `C` (ms, md): compare the CAS value.
    pub compare_cas: Option<u64>,
    /// `I` (ms, md): invalidate (mark stale) instead of storing/deleting.
    pub invalidate: bool,
    /// `M` (ms): the mode; `None` means set.
    pub mode: Option<MetaMode>,
}

/// A meta command's key and flags (`mg`, `md`, and `ms` through [`MetaSet`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta<'a> {
    /// The key token as sent (base64 text when `flags.base64`); at most 250 bytes.
    pub key: &'a [u8],
    pub flags: MetaFlags<'a>,
}

impl<'a> Meta<'a> {
    /// The key the item is stored under: the token itself, or its base64 decoding with `b`
    /// (already checked by the parser to decode to 1..=250 bytes).
    pub fn key_bytes(&self) -> Cow<'a, [u8]> {
        if self.flags.base64 {
            Cow::Owned(crate::base64::decode(self.key).unwrap_or_default())
        } else {
            Cow::Borrowed(self.key)
        }
    }
}

/// `ms <key> <datalen> <flag>*` with its data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaSet<'a> {
    pub meta: Meta<'a>,
    /// The value, without the trailing `\r\n`.
    pub data: &'a [u8],
}

/// Which meta command a set of flags belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaKind {
    Get,
    Set,
    Delete,
}

impl MetaKind {
    /// The flag letters this parser accepts for the command.
    pub fn accepted_flags(self) -> &'static [u8] {
        match self {
            MetaKind::Get => b"bcfkOqstvT",
            MetaKind::Set => b"bcCFIkOqsTMv",
            MetaKind::Delete => b"bCIkOqT",
        }
    }
}

/// One parsed command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    Store(Store<'a>),
    Get(Get<'a>),
    /// `touch <key> <exptime> [noreply]` → `TOUCHED` / `NOT_FOUND`.
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    /// `delete <key> [0] [noreply]` → `DELETED` / `NOT_FOUND`.
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    /// `incr|decr <key> <delta> [noreply]` → the new value / `NOT_FOUND`; see [`crate::incr_decr`].
    Arith {
        op: ArithOp,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]` → `OK`.
    FlushAll {
        delay: Option<i64>,
        noreply: bool,
    },
    /// `stats [group [args...]]`: `group` is `None` for the general stats; `args` are the
    /// tokens after the group. The store answers unknown groups with `ERROR` (as memcached).
    Stats {
        group: Option<&'a [u8]>,
        args: Vec<&'a [u8]>,
    },
    /// `version` → `VERSION <version>`.
    Version,
    /// `verbosity <level> [noreply]` → `OK`.
    Verbosity {
        level: u32,
        noreply: bool,
    },
    /// `quit`: close the connection without a reply.
    Quit,
    /// `mg <key> <flag>*`.
    MetaGet(Meta<'a>),
    /// `ms <key> <datalen> <flag>*` + data.
    MetaSet(MetaSet<'a>),
    /// `md <key> <flag>*`.
    MetaDelete(Meta<'a>),
    /// `mn` → `MN`.
    MetaNoop,
}

impl Command<'_> {
    /// Whether the client asked for no reply (`noreply`, or `q` on meta commands — which
    /// suppresses only some replies, see [`crate::MetaStatus::is_quiet_for`]).
    pub fn noreply(&self) -> bool {
        match self {
            Command::Store(s) => s.noreply,
            Command::Touch { noreply, .. }
            | Command::Delete { noreply, .. }
            | Command::Arith { noreply, .. }
            | Command::FlushAll { noreply, .. }
            | Command::Verbosity { noreply, .. } => *noreply,
            Command::MetaGet(m) | Command::MetaDelete(m) => m.flags.quiet,
            Command::MetaSet(m) => m.meta.flags.quiet,
            _ => false,
        }
    }
}
