//! The agent's reads: a value's chunks fetched from the members, decoded, a lost or damaged
//! chunk repaired (on the engine's repair plan when it has one) and written back.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use graph::Scheme;

use crate::agent::index::{self, Entry};
use crate::carrier::peer::{AgentResult, Request, Response};
use crate::cluster::stripe;
use crate::node::{bump, Fetched, Node};
use crate::record::{self, Header, Kind};
use crate::time;

impl Node {
    pub(crate) fn op_get(
        &self,
        stripe: usize,
        key: &[u8],
        touch: Option<i64>,
        degrade: Option<u8>,
    ) -> AgentResult {
        let Some(mut e) = self.lookup(stripe, key) else {
            return AgentResult::Miss;
        };
        match self.read_value(stripe, key, &e, degrade) {
            Ok(value) => {
                if let Some(t) = touch {
                    self.touch_entry(stripe, key, &e, t);
                    e.exptime = time::absolute_exptime(t, time::now_secs());
                }
                AgentResult::Value {
                    flags: e.flags,
                    cas: e.cas(),
                    exptime: e.exptime,
                    value,
                }
            }
            Err(reason) => {
                bump(&self.counters.server_errors);
                AgentResult::Error(reason)
            }
        }
    }

    /// Fetches records of `e.version` at `positions` and checks them: the good ones' data, and
    /// the positions that are missing, unreachable, of another version or corrupt (the latter
    /// flagged `true`).
    pub(crate) fn fetch(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        positions: &[usize],
    ) -> Fetched {
        let calls = positions
            .iter()
            .map(|&p| {
                (
                    self.placement.node_of(stripe, p),
                    Request::Get {
                        stripe: stripe as u32,
                        position: p as u8,
                        key: key.to_vec(),
                        version: e.version,
                    },
                )
            })
            .collect();
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for (&p, r) in positions.iter().zip(self.call(calls)) {
            match r {
                Ok(Response::Record(Some(bytes))) => match record::parse(&bytes) {
                    Ok((h, data))
                        if h.version == e.version
                            && h.key == key
                            && h.chunk_index as usize == p =>
                    {
                        good.push((p, data.to_vec()))
                    }
                    Ok(_) => {
                        bump(&self.counters.version_mismatches);
                        bad.push((p, false));
                    }
                    Err(_) => {
                        bump(&self.counters.crc_errors);
                        bad.push((p, true));
                    }
                },
                _ => bad.push((p, false)),
            }
        }
        // A member without this version's record (or unreachable) is a hole to fill once it is
        // up; a corrupt one is rewritten by the read itself.
        let holes = bad
            .iter()
            .filter(|(_, corrupt)| !corrupt)
            .fold(0u64, |m, (p, _)| m | index::bit(*p));
        if holes != 0 {
            self.with_index(stripe, |ix| ix.mark_holes(key, e.version, holes));
        }
        (good, bad)
    }

    /// Reads a value: the data chunks of one version, or a degraded read through a repair
    /// when some are missing (`degrade` forces that position to be treated as missing).
    pub(crate) fn read_value(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        degrade: Option<u8>,
    ) -> Result<Vec<u8>, String> {
        if let Some(p) = degrade {
            if p as usize >= e.positions {
                return Err(format!(
                    "cannot force a degraded read of position {p}: the value has positions 0..{}",
                    e.positions
                ));
            }
            bump(&self.counters.forced_degraded_reads);
        }
        let usable =
            |p: usize| Some(p as u8) != degrade && self.is_up(self.placement.node_of(stripe, p));
        match e.kind {
            Kind::Whole => self.read_whole(stripe, key, e, degrade),
            Kind::Replica => {
                // This node's replica first, then the others in position order.
                let mut order: Vec<usize> = (0..e.positions).filter(|&p| usable(p)).collect();
                order.sort_by_key(|&p| self.placement.node_of(stripe, p) != self.cfg.id);
                let mut corrupt = Vec::new();
                for p in order {
                    let (good, bad) = self.fetch(stripe, key, e, &[p]);
                    if let Some((_, data)) = good.into_iter().next() {
                        if degrade.is_some() || !corrupt.is_empty() {
                            bump(&self.counters.degraded_reads);
                        }
                        for c in corrupt {
                            self.write_back(stripe, key, e, c, &data);
                        }
                        return Ok(data);
                    }
                    if bad.first().is_some_and(|b| b.1) {
                        corrupt.push(p);
                    }
                }
                Err(format!(
                    "no replica of the value is readable: {} of {} members of stripe {stripe} down (nodes {:?})",
                    self.down_positions(stripe),
                    self.n(),
                    self.down_members(stripe)
                ))
            }
            Kind::Coded => {
                let k = self.k();
                let wanted: Vec<usize> = (0..k).collect();
                let mut first: Vec<usize> = wanted.iter().copied().filter(|&p| usable(p)).collect();
                // The normal read on the engine: the stripe's read template brings the data
                // chunks other nodes hold; this node's own are read locally.
                let mut planned = Vec::new();
                let plan = match self.plan_path(stripe, k) {
                    Some(x) if first.len() == k => Some(x),
                    _ => None,
                };
                if let Some(x) = plan {
                    let chunk_bytes = (e.value_bytes as usize).div_ceil(k);
                    match x.read(
                        self.cfg.code,
                        self.cfg.mode,
                        &self.placement,
                        stripe,
                        key,
                        e.version,
                        chunk_bytes,
                        &|n| self.is_up(n),
                    ) {
                        Ok(chunks) => {
                            x.counters.read_plan_runs.fetch_add(1, Ordering::Relaxed);
                            planned = chunks;
                            first.retain(|&p| self.placement.node_of(stripe, p) == self.cfg.id);
                        }
                        Err(reason) => {
                            x.counters
                                .read_plan_fallbacks
                                .fetch_add(1, Ordering::Relaxed);
                            log::warn!(
                                "node {}: read of stripe {stripe} over peer messages instead \
                                 of its plan: {reason}",
                                self.cfg.id
                            );
                            // A member marked down meanwhile (the run was given up for it) is
                            // not asked again: the read goes degraded without it.
                            first.retain(|&p| usable(p));
                        }
                    }
                } else if let (Some(x), None) = (self.plans.as_ref(), degrade) {
                    x.counters
                        .read_plan_fallbacks
                        .fetch_add(1, Ordering::Relaxed);
                }
                let (mut good, bad) = self.fetch(stripe, key, e, &first);
                good.extend(planned);
                let mut have: Vec<Option<Vec<u8>>> = vec![None; self.n()];
                for (p, d) in good {
                    have[p] = Some(d);
                }
                let mut failed: BTreeSet<usize> = (0..self.n()).filter(|&p| !usable(p)).collect();
                let mut corrupt: Vec<usize> = Vec::new();
                for (p, c) in bad {
                    failed.insert(p);
                    if c {
                        corrupt.push(p);
                    }
                }
                let missing: Vec<usize> = wanted
                    .iter()
                    .copied()
                    .filter(|&p| have[p].is_none())
                    .collect();
                if missing.is_empty() {
                    let data: Vec<&[u8]> = have[..k]
                        .iter()
                        .map(|c| c.as_deref().expect("have"))
                        .collect();
                    return Ok(stripe::join(&data, e.value_bytes as usize));
                }
                bump(&self.counters.degraded_reads);
                if let Some(value) = self.plan_read(
                    stripe,
                    key,
                    e,
                    degrade,
                    &failed,
                    &missing,
                    &corrupt,
                    have.clone(),
                ) {
                    return Ok(value);
                }
                // The agent-side repair: the scheme's minimal read set among the positions
                // left, widened each time a helper fails too.
                loop {
                    let available: Vec<usize> =
                        (0..self.n()).filter(|p| !failed.contains(p)).collect();
                    let set = self.codec.repair_set(&available, &missing).map_err(|err| {
                        format!(
                            "value of stripe {stripe} unreadable ({err}): {} of {} members down (nodes {:?}), {} tolerates {}",
                            self.down_positions(stripe),
                            self.n(),
                            self.down_members(stripe),
                            self.cfg.code,
                            self.parity()
                        )
                    })?;
                    let need: Vec<usize> =
                        set.iter().copied().filter(|&p| have[p].is_none()).collect();
                    if need.is_empty() {
                        let chunk_bytes = (e.value_bytes as usize).div_ceil(k);
                        let chunks: Vec<Option<&[u8]>> = (0..self.n())
                            .map(|p| {
                                if set.contains(&p) {
                                    have[p].as_deref()
                                } else {
                                    None
                                }
                            })
                            .collect();
                        let mut outs = vec![vec![0u8; chunk_bytes]; missing.len()];
                        if chunk_bytes > 0 {
                            let mut refs: Vec<&mut [u8]> =
                                outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                            self.codec
                                .reconstruct(&chunks, &missing, &mut refs)
                                .map_err(|err| format!("repair failed: {err}"))?;
                        }
                        return Ok(self.accept_repaired(
                            stripe, key, e, degrade, &missing, &corrupt, outs, &mut have,
                        ));
                    }
                    let (good, bad) = self.fetch(stripe, key, e, &need);
                    for (p, d) in good {
                        have[p] = Some(d);
                    }
                    for (p, c) in bad {
                        failed.insert(p);
                        if c {
                            corrupt.push(p);
                        }
                    }
                }
            }
        }
    }

    /// A degraded read through the scheme's repair plan on the engine: `None` (with the reason
    /// logged) when there is no engine path or the plan cannot run, and the caller repairs at
    /// the agent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan_read(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        degrade: Option<u8>,
        failed: &BTreeSet<usize>,
        missing: &[usize],
        corrupt: &[usize],
        mut have: Vec<Option<Vec<u8>>>,
    ) -> Option<Vec<u8>> {
        let x = self.plans.as_ref()?;
        let k = self.k();
        let chunk_bytes = (e.value_bytes as usize).div_ceil(k);
        let lost: Vec<usize> = failed.iter().copied().collect();
        let members: Vec<usize> = (0..self.n())
            .map(|p| self.placement.node_of(stripe, p))
            .collect();
        let at = crate::carrier::plans::RepairAt {
            code: self.cfg.code,
            scheme: self.cfg.scheme,
            mode: self.cfg.mode,
            members: &members,
            agent: self.cfg.id,
            stripe,
            lost: &lost,
        };
        let outs = match x.repair(&at, missing, key, e.version, chunk_bytes, &|n| {
            self.is_up(n)
        }) {
            Ok(o) => o,
            Err(reason) => {
                x.counters
                    .degraded_plan_fallbacks
                    .fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    "node {}: degraded read of stripe {stripe} repaired at the agent instead of \
                     on the engine: {reason}",
                    self.cfg.id
                );
                return None;
            }
        };
        x.counters
            .degraded_plan_runs
            .fetch_add(1, Ordering::Relaxed);
        Some(self.accept_repaired(stripe, key, e, degrade, missing, corrupt, outs, &mut have))
    }

    /// Takes the repaired chunks of a degraded read (from the agent's repair or the engine's
    /// plan): counts them, writes back those the rules say — TriEC every repaired chunk
    /// (in-band recovery) but the one a request forced missing, every scheme a chunk that
    /// failed its CRC — and joins the value from the data chunks.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept_repaired(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        degrade: Option<u8>,
        missing: &[usize],
        corrupt: &[usize],
        outs: Vec<Vec<u8>>,
        have: &mut [Option<Vec<u8>>],
    ) -> Vec<u8> {
        self.counters
            .chunks_repaired
            .fetch_add(missing.len() as u64, Ordering::Relaxed);
        for (p, c) in missing.iter().zip(outs) {
            let back = corrupt.contains(p)
                || (self.cfg.scheme == Scheme::Triec && degrade != Some(*p as u8));
            if back && self.is_up(self.placement.node_of(stripe, *p)) {
                self.write_back(stripe, key, e, *p, &c);
            }
            have[*p] = Some(c);
        }
        let data: Vec<&[u8]> = have[..self.k()]
            .iter()
            .map(|c| c.as_deref().expect("have"))
            .collect();
        stripe::join(&data, e.value_bytes as usize)
    }

    /// Rebuilds the data of one position of a value (recovery) from the code's minimal read
    /// set among the other positions (LRC: the position's local group when it is whole),
    /// widened each time a helper fails; a replica is copied from another replica.
    pub(crate) fn repair_chunk(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        target: usize,
    ) -> Result<Vec<u8>, String> {
        let usable = |p: usize| p != target && self.is_up(self.placement.node_of(stripe, p));
        if e.kind == Kind::Whole {
            // The home's record (its one position), rebuilt from its page's stripe.
            return self.read_whole(stripe, key, e, Some(0));
        }
        if e.kind == Kind::Replica {
            for p in (0..e.positions).filter(|&p| usable(p)) {
                if let Some((_, data)) = self.fetch(stripe, key, e, &[p]).0.into_iter().next() {
                    return Ok(data);
                }
            }
            return Err(format!(
                "no other replica of the value is readable in stripe {stripe}"
            ));
        }
        let n = self.n();
        let mut failed: BTreeSet<usize> = (0..n).filter(|&p| !usable(p)).collect();
        let mut have: Vec<Option<Vec<u8>>> = vec![None; n];
        loop {
            let available: Vec<usize> = (0..n).filter(|p| !failed.contains(p)).collect();
            let set = self
                .codec
                .repair_set(&available, &[target])
                .map_err(|err| {
                    format!("position {target} of stripe {stripe} cannot be rebuilt: {err}")
                })?;
            let need: Vec<usize> = set.iter().copied().filter(|&p| have[p].is_none()).collect();
            if need.is_empty() {
                let chunk_bytes = (e.value_bytes as usize).div_ceil(self.k());
                let mut out = vec![0u8; chunk_bytes];
                if chunk_bytes > 0 {
                    let chunks: Vec<Option<&[u8]>> = (0..n)
                        .map(|p| {
                            if set.contains(&p) {
                                have[p].as_deref()
                            } else {
                                None
                            }
                        })
                        .collect();
                    self.codec
                        .reconstruct(&chunks, &[target], &mut [out.as_mut_slice()])
                        .map_err(|err| format!("repair failed: {err}"))?;
                }
                bump(&self.counters.chunks_repaired);
                return Ok(out);
            }
            let (good, bad) = self.fetch(stripe, key, e, &need);
            for (p, d) in good {
                have[p] = Some(d);
            }
            for (p, _) in bad {
                failed.insert(p);
            }
        }
    }

    pub(crate) fn header(&self, key: &[u8], e: &Entry, position: usize) -> Header {
        Header {
            kind: e.kind,
            chunk_index: position as u8,
            written_around: e.holes != 0,
            key: key.to_vec(),
            version: e.version,
            value_bytes: e.value_bytes,
            flags: e.flags,
            exptime: e.exptime,
            trail: e.trail,
        }
    }

    pub(crate) fn write_back(
        &self,
        stripe: usize,
        key: &[u8],
        e: &Entry,
        position: usize,
        data: &[u8],
    ) -> bool {
        let rec = record::encode(&self.header(key, e, position), data);
        let watermark = self.with_index(stripe, |ix| ix.watermark());
        let node = self.placement.node_of(stripe, position);
        if let Some(Ok(Response::Ack)) = self
            .call(vec![(
                node,
                Request::Put {
                    stripe: stripe as u32,
                    watermark,
                    record: rec,
                },
            )])
            .pop()
        {
            bump(&self.counters.chunks_written_back);
            return true;
        }
        false
    }
}
