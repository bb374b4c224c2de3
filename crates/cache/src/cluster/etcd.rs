//! [`Coordinator`] over etcd (v3 API): a node's lease and registration, leadership keys
//! created only if absent, their creation revisions as fencing tokens.
//!
//! Keys, under the cluster's prefix (`/inec` unless the address names one):
//! `<prefix>/node/<id>` = `ready` or `starting`, bound to the node's lease;
//! `<prefix>/leader/<stripe>` = the holder's id, bound to the holder's lease.
//!
//! Every call is made on a one-thread runtime owned here, driven only inside the call, with a
//! deadline: a coordinator that does not answer is an error, never a wait without end.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaseKeepAliveStream, LeaseKeeper,
    PutOptions, Txn, TxnOp,
};

use crate::cluster::coord::{CoordError, Coordinator, Holder, Registration, Snapshot};

/// The longest any one call may take.
const CALL_TIMEOUT: Duration = Duration::from_millis(800);

/// `etcd://HOST:PORT[,HOST:PORT…][/PREFIX]`: the endpoints and the key prefix.
pub fn parse_url(url: &str) -> Result<(Vec<String>, String), CoordError> {
    let rest = url.strip_prefix("etcd://").ok_or_else(|| {
        CoordError(format!(
            "{url:?}: a coordinator is etcd://HOST:PORT[,HOST:PORT...][/PREFIX]"
        ))
    })?;
    let (hosts, prefix) = match rest.split_once('/') {
        Some((h, p)) if !p.is_empty() => (h, format!("/{}", p.trim_end_matches('/'))),
        Some((h, _)) => (h, "/inec".to_string()),
        None => (rest, "/inec".to_string()),
    };
    let endpoints: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| format!("http://{h}"))
        .collect();
    if endpoints.is_empty() {
        return Err(CoordError(format!("{url:?} names no etcd endpoint")));
    }
    for h in hosts.split(',').filter(|h| !h.is_empty()) {
        let port_ok = h
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(CoordError(format!("{url:?}: {h:?} is not HOST:PORT")));
        }
    }
    Ok((endpoints, prefix))
}

/// A connection to an etcd cluster.
pub struct EtcdCoordinator {
    rt: tokio::runtime::Runtime,
    endpoints: Vec<String>,
    prefix: String,
    client: Mutex<Option<Client>>,
    keepers: Mutex<HashMap<i64, (LeaseKeeper, LeaseKeepAliveStream)>>,
}

impl std::fmt::Debug for EtcdCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCoordinator")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn err(e: impl std::fmt::Display) -> CoordError {
    CoordError(format!("etcd: {e}"))
}

impl EtcdCoordinator {
    /// A coordinator for `url` (see [`parse_url`]); connects on first use.
    pub fn new(url: &str) -> Result<EtcdCoordinator, CoordError> {
        let (endpoints, prefix) = parse_url(url)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(err)?;
        Ok(EtcdCoordinator {
            rt,
            endpoints,
            prefix,
            client: Mutex::new(None),
            keepers: Mutex::new(HashMap::new()),
        })
    }

    fn node_key(&self, node: usize) -> String {
        format!("{}/node/{node}", self.prefix)
    }

    fn leader_key(&self, stripe: usize) -> String {
        format!("{}/leader/{stripe}", self.prefix)
    }

    /// Runs `f` with a client, connecting first if need be, within [`CALL_TIMEOUT`]; a failed
    /// call drops the client so the next one connects again.
    fn call<T, F, Fut>(&self, f: F) -> Result<T, CoordError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut slot = self.client.lock().unwrap_or_else(|p| p.into_inner());
        let client = match slot.as_ref() {
            Some(c) => c.clone(),
            None => {
                // HTTP/2 pings find a connection a silent cut left open; a failed call drops
                // the client anyway (below).
                let opts = ConnectOptions::new()
                    .with_connect_timeout(CALL_TIMEOUT)
                    .with_timeout(CALL_TIMEOUT)
                    .with_keep_alive(CALL_TIMEOUT, CALL_TIMEOUT)
                    .with_keep_alive_while_idle(true);
                let c = self
                    .rt
                    .block_on(async {
                        tokio::time::timeout(
                            CALL_TIMEOUT,
                            Client::connect(self.endpoints.clone(), Some(opts)),
                        )
                        .await
                    })
                    .map_err(|_| err("connect timed out"))?
                    .map_err(err)?;
                *slot = Some(c.clone());
                c
            }
        };
        drop(slot);
        let r = self
            .rt
            .block_on(async { tokio::time::timeout(CALL_TIMEOUT, f(client)).await });
        let failed = match r {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => err(e),
            Err(_) => err("call timed out"),
        };
        // An answer from etcd (a refused transaction, a lease not found) keeps the
        // connection; a timeout or a transport error drops it, so that the next call connects
        // afresh instead of waiting on a connection a cut left hanging.
        if !lease_not_found(&failed) {
            *self.client.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        Err(failed)
    }
}

/// Whether an etcd error says the lease does not exist.
fn lease_not_found(e: &CoordError) -> bool {
    e.0.contains("lease not found")
}

impl Coordinator for EtcdCoordinator {
    fn grant(&self, ttl: Duration) -> Result<(i64, Duration), CoordError> {
        let secs = ttl.as_secs().max(1) as i64;
        let r = self.call(|mut c| async move { c.lease_grant(secs, None).await })?;
        Ok((r.id(), Duration::from_secs(r.ttl().max(0) as u64)))
    }

    fn keep_alive(&self, lease: i64) -> Result<Option<Duration>, CoordError> {
        let mut keepers = self.keepers.lock().unwrap_or_else(|p| p.into_inner());
        keepers.retain(|&id, _| id == lease);
        if !keepers.contains_key(&lease) {
            let pair = match self.call(|mut c| async move { c.lease_keep_alive(lease).await }) {
                Err(e) if lease_not_found(&e) => return Ok(None),
                r => r?,
            };
            keepers.insert(lease, pair);
        }
        let (keeper, stream) = keepers.get_mut(&lease).expect("inserted above");
        let r = self.rt.block_on(async {
            tokio::time::timeout(CALL_TIMEOUT, async {
                keeper.keep_alive().await?;
                stream.message().await
            })
            .await
        });
        match r {
            Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                Ok(Some(Duration::from_secs(resp.ttl() as u64)))
            }
            Ok(Ok(Some(_))) => {
                keepers.remove(&lease);
                Ok(None)
            }
            Ok(Ok(None)) => {
                keepers.remove(&lease);
                Err(err("keep-alive stream closed"))
            }
            Ok(Err(e)) => {
                keepers.remove(&lease);
                let e = err(e);
                if lease_not_found(&e) {
                    // Expired (a stall longer than its time to live) or revoked.
                    return Ok(None);
                }
                Err(e)
            }
            Err(_) => {
                keepers.remove(&lease);
                Err(err("keep-alive timed out"))
            }
        }
    }

    fn register(&self, node: usize, reg: Registration) -> Result<(), CoordError> {
        let key = self.node_key(node);
        let value = if reg.ready { "ready" } else { "starting" };
        self.call(|mut c| async move {
            c.put(key, value, Some(PutOptions::new().with_lease(reg.lease)))
                .await
        })
        .map(|_| ())
    }

    fn snapshot(&self, nodes: usize) -> Result<Snapshot, CoordError> {
        let prefix = format!("{}/", self.prefix);
        let r = self.call(|mut c| async move {
            c.get(prefix, Some(GetOptions::new().with_prefix())).await
        })?;
        let mut snap = Snapshot {
            nodes: vec![None; nodes],
            leaders: vec![None; nodes],
        };
        let (node_dir, leader_dir) = (
            format!("{}/node/", self.prefix),
            format!("{}/leader/", self.prefix),
        );
        for kv in r.kvs() {
            let (Ok(key), Ok(value)) = (kv.key_str(), kv.value_str()) else {
                continue;
            };
            if let Some(id) = key
                .strip_prefix(&node_dir)
                .and_then(|i| i.parse::<usize>().ok())
            {
                if id < nodes {
                    snap.nodes[id] = Some(Registration {
                        lease: kv.lease(),
                        ready: value == "ready",
                    });
                }
            } else if let Some(s) = key
                .strip_prefix(&leader_dir)
                .and_then(|i| i.parse::<usize>().ok())
            {
                if let (true, Ok(node)) = (s < nodes, value.parse::<usize>()) {
                    snap.leaders[s] = Some(Holder {
                        node,
                        lease: kv.lease(),
                        token: kv.create_revision().max(0) as u64,
                    });
                }
            }
        }
        Ok(snap)
    }

    fn acquire(&self, stripe: usize, node: usize, lease: i64) -> Result<Option<u64>, CoordError> {
        let key = self.leader_key(stripe);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                node.to_string(),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let r = self.call(|mut c| async move { c.txn(txn).await })?;
        if !r.succeeded() {
            return Ok(None);
        }
        let rev = r.header().map_or(0, |h| h.revision());
        if rev <= 0 {
            return Err(err("a transaction without a revision"));
        }
        Ok(Some(rev as u64))
    }

    fn resign(&self, stripe: usize, token: u64) -> Result<(), CoordError> {
        let key = self.leader_key(stripe);
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                token as i64,
            )])
            .and_then([TxnOp::delete(key, None)]);
        self.call(|mut c| async move { c.txn(txn).await })
            .map(|_| ())
    }

    fn revoke(&self, lease: i64) -> Result<(), CoordError> {
        match self.call(|mut c| async move { c.lease_revoke(lease).await }) {
            Err(e) if lease_not_found(&e) => Ok(()),
            r => r.map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_url;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("etcd://127.0.0.1:2379").unwrap(),
            (
                vec!["http://127.0.0.1:2379".to_string()],
                "/inec".to_string()
            )
        );
        assert_eq!(
            parse_url("etcd://a:1,b:2/c1/").unwrap(),
            (
                vec!["http://a:1".to_string(), "http://b:2".to_string()],
                "/c1".to_string()
            )
        );
        assert!(parse_url("http://a:1").is_err());
        assert!(parse_url("etcd://").is_err());
        assert!(parse_url("etcd://host").is_err());
        assert!(parse_url("etcd://host:x").is_err());
    }
}
