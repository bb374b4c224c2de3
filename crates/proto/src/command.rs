//! The parsed commands. A [`Command`] borrows every byte string from the caller's buffer; an
//! [`OwnedCommand`] holds its own copies, for a request carried past its buffer (a server
//! handing it to another thread). Both are one type, [`CommandOf`], over the byte strings.

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
pub struct StoreOf<B> {
    pub mode: StoreMode,
    pub key: B,
    /// The client's opaque 32-bit flags, returned with every read.
    pub flags: u32,
    /// As sent: 0 = never, ≤ 30 days = relative seconds, otherwise a Unix time; negative means
    /// already expired. Interpreting it is the store's job.
    pub exptime: i64,
    /// Only for [`StoreMode::Cas`]; 0 otherwise.
    pub cas_unique: u64,
    pub noreply: bool,
    /// The value, without the trailing `\r\n`; at most the item size limit.
    pub data: B,
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
pub struct GetOf<B> {
    pub kind: GetKind,
    /// `Some` for `gat`/`gats` only: the new exptime of every hit.
    pub exptime: Option<i64>,
    /// At least one key for `get`/`gets`; `gat`/`gats` may have none (memcached answers `END`).
    pub keys: Vec<B>,
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
pub struct MetaFlagOf<B> {
    pub letter: u8,
    pub token: B,
}

/// The flags of a meta command, validated and decoded. `list` keeps them in request order (the
/// composers use it to return flags in that order); the other fields are the decoded values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaFlagsOf<B> {
    pub list: Vec<MetaFlagOf<B>>,
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
    pub opaque: Option<B>,
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
    /// `M` (ma): increment (`I`, `+`) or decrement (`D`, `-`); `None` means increment.
    pub arith: Option<ArithOp>,
    /// `N` (ma): on a miss, create the item with this TTL (autovivify) and [`Self::initial`].
    pub vivify: Option<i64>,
    /// `J` (ma): the number an item created on a miss starts at (default 0).
    pub initial: Option<u64>,
    /// `D` (ma): the delta to add or subtract (default 1).
    pub delta: Option<u64>,
}

/// A meta command's key and flags (`mg`, `md`, and `ms` through [`MetaSet`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaOf<B> {
    /// The key token as sent (base64 text when `flags.base64`); at most 250 bytes.
    pub key: B,
    pub flags: MetaFlagsOf<B>,
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
pub struct MetaSetOf<B> {
    pub meta: MetaOf<B>,
    /// The value, without the trailing `\r\n`.
    pub data: B,
}

/// Which meta command a set of flags belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaKind {
    Get,
    Set,
    Delete,
    Arith,
}

impl MetaKind {
    /// The flag letters this parser accepts for the command.
    pub fn accepted_flags(self) -> &'static [u8] {
        match self {
            MetaKind::Get => b"bcfkOqstvT",
            MetaKind::Set => b"bcCFIkOqsTMv",
            MetaKind::Delete => b"bCIkOqT",
            // memcached 1.6.18's `ma` also takes `f h l s u F I L P R` and ignores them.
            MetaKind::Arith => b"bcfhklqstuvCDFIJLMNOPRT",
        }
    }
}

/// One parsed command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandOf<B> {
    Store(StoreOf<B>),
    Get(GetOf<B>),
    /// `touch <key> <exptime> [noreply]` → `TOUCHED` / `NOT_FOUND`.
    Touch {
        key: B,
        exptime: i64,
        noreply: bool,
    },
    /// `delete <key> [0] [noreply]` → `DELETED` / `NOT_FOUND`.
    Delete {
        key: B,
        noreply: bool,
    },
    /// `incr|decr <key> <delta> [noreply]` → the new value / `NOT_FOUND`; see [`crate::incr_decr`].
    Arith {
        op: ArithOp,
        key: B,
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
        group: Option<B>,
        args: Vec<B>,
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
    MetaGet(MetaOf<B>),
    /// `ms <key> <datalen> <flag>*` + data.
    MetaSet(MetaSetOf<B>),
    /// `md <key> <flag>*`.
    MetaDelete(MetaOf<B>),
    /// `ma <key> <flag>*`: incr or decr, created on a miss with `N`.
    MetaArith(MetaOf<B>),
    /// `mn` → `MN`.
    MetaNoop,
}

impl<B> CommandOf<B> {
    /// Whether the client asked for no reply (`noreply`, or `q` on meta commands — which
    /// suppresses only some replies, see [`crate::MetaStatus::is_quiet_for`]).
    pub fn noreply(&self) -> bool {
        match self {
            CommandOf::Store(s) => s.noreply,
            CommandOf::Touch { noreply, .. }
            | CommandOf::Delete { noreply, .. }
            | CommandOf::Arith { noreply, .. }
            | CommandOf::FlushAll { noreply, .. }
            | CommandOf::Verbosity { noreply, .. } => *noreply,
            CommandOf::MetaGet(m) | CommandOf::MetaDelete(m) | CommandOf::MetaArith(m) => {
                m.flags.quiet
            }
            CommandOf::MetaSet(m) => m.meta.flags.quiet,
            _ => false,
        }
    }
}

/// A store command borrowing its buffer.
pub type Store<'a> = StoreOf<&'a [u8]>;
/// A get command borrowing its buffer.
pub type Get<'a> = GetOf<&'a [u8]>;
/// A meta flag borrowing its buffer.
pub type MetaFlag<'a> = MetaFlagOf<&'a [u8]>;
/// A meta command's flags borrowing its buffer.
pub type MetaFlags<'a> = MetaFlagsOf<&'a [u8]>;
/// A meta command borrowing its buffer.
pub type Meta<'a> = MetaOf<&'a [u8]>;
/// A meta set borrowing its buffer.
pub type MetaSet<'a> = MetaSetOf<&'a [u8]>;
/// One parsed command, borrowing its buffer.
pub type Command<'a> = CommandOf<&'a [u8]>;
/// One parsed command holding its own byte strings.
pub type OwnedCommand = CommandOf<Vec<u8>>;

impl<B> StoreOf<B> {
    fn map<'s, C>(&'s self, f: &impl Fn(&'s B) -> C) -> StoreOf<C> {
        StoreOf {
            mode: self.mode,
            key: f(&self.key),
            flags: self.flags,
            exptime: self.exptime,
            cas_unique: self.cas_unique,
            noreply: self.noreply,
            data: f(&self.data),
        }
    }
}

impl<B> GetOf<B> {
    fn map<'s, C>(&'s self, f: &impl Fn(&'s B) -> C) -> GetOf<C> {
        GetOf {
            kind: self.kind,
            exptime: self.exptime,
            keys: self.keys.iter().map(f).collect(),
        }
    }
}

impl<B> MetaOf<B> {
    fn map<'s, C>(&'s self, f: &impl Fn(&'s B) -> C) -> MetaOf<C> {
        let m = &self.flags;
        MetaOf {
            key: f(&self.key),
            flags: MetaFlagsOf {
                list: (m.list.iter())
                    .map(|t| MetaFlagOf {
                        letter: t.letter,
                        token: f(&t.token),
                    })
                    .collect(),
                base64: m.base64,
                return_value: m.return_value,
                return_key: m.return_key,
                return_client_flags: m.return_client_flags,
                return_ttl: m.return_ttl,
                return_cas: m.return_cas,
                return_size: m.return_size,
                quiet: m.quiet,
                opaque: m.opaque.as_ref().map(f),
                ttl: m.ttl,
                client_flags: m.client_flags,
                compare_cas: m.compare_cas,
                invalidate: m.invalidate,
                mode: m.mode,
                arith: m.arith,
                vivify: m.vivify,
                initial: m.initial,
                delta: m.delta,
            },
        }
    }
}

impl<B> CommandOf<B> {
    /// The same command over other byte strings: `f` of each.
    pub fn map<'s, C>(&'s self, f: &impl Fn(&'s B) -> C) -> CommandOf<C> {
        match self {
            CommandOf::Store(st) => CommandOf::Store(st.map(f)),
            CommandOf::Get(g) => CommandOf::Get(g.map(f)),
            CommandOf::Touch {
                key,
                exptime,
                noreply,
            } => CommandOf::Touch {
                key: f(key),
                exptime: *exptime,
                noreply: *noreply,
            },
            CommandOf::Delete { key, noreply } => CommandOf::Delete {
                key: f(key),
                noreply: *noreply,
            },
            CommandOf::Arith {
                op,
                key,
                delta,
                noreply,
            } => CommandOf::Arith {
                op: *op,
                key: f(key),
                delta: *delta,
                noreply: *noreply,
            },
            CommandOf::FlushAll { delay, noreply } => CommandOf::FlushAll {
                delay: *delay,
                noreply: *noreply,
            },
            CommandOf::Stats { group, args } => CommandOf::Stats {
                group: group.as_ref().map(f),
                args: args.iter().map(f).collect(),
            },
            CommandOf::Version => CommandOf::Version,
            CommandOf::Verbosity { level, noreply } => CommandOf::Verbosity {
                level: *level,
                noreply: *noreply,
            },
            CommandOf::Quit => CommandOf::Quit,
            CommandOf::MetaGet(m) => CommandOf::MetaGet(m.map(f)),
            CommandOf::MetaSet(ms) => CommandOf::MetaSet(MetaSetOf {
                meta: ms.meta.map(f),
                data: f(&ms.data),
            }),
            CommandOf::MetaDelete(m) => CommandOf::MetaDelete(m.map(f)),
            CommandOf::MetaArith(m) => CommandOf::MetaArith(m.map(f)),
            CommandOf::MetaNoop => CommandOf::MetaNoop,
        }
    }
}

impl Command<'_> {
    /// The command with its own copies of its byte strings (a request carried past the buffer
    /// it was parsed from, with no second parse).
    pub fn to_owned_command(&self) -> OwnedCommand {
        self.map(&|b| b.to_vec())
    }
}

impl OwnedCommand {
    /// The command borrowing this one's byte strings.
    pub fn as_command(&self) -> Command<'_> {
        fn slice(b: &Vec<u8>) -> &[u8] {
            b
        }
        self.map(&slice)
    }
}
