//! One network namespace per node behind a veth pair on a bridge, each link rate-limited with
//! `tc tbf` (root): the network-bound testbed of `inec cluster up --netns` and
//! `inec cache up --netns`. The names are machine-wide: one namespace cluster at a time.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::process::run as sh;
use crate::Error;

const BRIDGE: &str = "inec-br";

/// The machine's one namespace-cluster slot, held while it lasts. Whoever brings a namespace
/// cluster up for a while (a test) takes it first, so that two on one machine (two tests of one
/// binary run in parallel) take turns instead of one finding the bridge taken. An advisory lock
/// on a file in the temporary directory, released when this is dropped or the process dies.
#[derive(Debug)]
pub struct Slot {
    _file: std::fs::File,
}

/// What a namespace cluster lacks on this machine, and what provides it, if it cannot be
/// made: root, `ip` and `tc`, and a free bridge.
pub fn unavailable() -> Option<(&'static str, &'static str)> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some((
            "root (for network namespaces)",
            "root, or CAP_SYS_ADMIN and CAP_NET_ADMIN",
        ));
    }
    for tool in ["ip", "tc"] {
        let ok = Command::new(tool)
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Some((
                if tool == "ip" { "`ip`" } else { "`tc`" },
                "Debian package iproute2",
            ));
        }
    }
    if Path::new("/sys/class/net").join(BRIDGE).exists() {
        return Some((
            "a free bridge inec-br (another namespace cluster is up on this machine)",
            "that cluster taken down: `inec cache down` or `inec cluster down`",
        ));
    }
    None
}

/// Waits for the namespace-cluster slot (see [`Slot`]).
pub fn slot() -> Result<Slot, Error> {
    let path = std::env::temp_dir().join("inec-netns.lock");
    let io = |source| Error::Io {
        what: format!("the namespace-cluster lock {}", path.display()),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io)?;
    file.lock().map_err(io)?;
    Ok(Slot { _file: file })
}

/// The namespace of node `i`.
pub fn ns_name(i: usize) -> String {
    format!("inec-ns{i}")
}

/// The address of node `i` inside its namespace.
pub fn ns_addr(i: usize) -> String {
    format!("10.77.{}.{}", (i + 10) / 250, (i + 10) % 250 + 2)
}

/// Parses `1gbit`, `500mbit`, `100kbit` into bits per second.
pub fn parse_rate(s: &str) -> Result<u64, Error> {
    let s = s.trim().to_ascii_lowercase();
    let bad = |why: &str| Error::Usage(format!("bad link rate {s:?}: {why}"));
    let (num, mult) = if let Some(n) = s.strip_suffix("gbit") {
        (n, 1_000_000_000)
    } else if let Some(n) = s.strip_suffix("mbit") {
        (n, 1_000_000)
    } else if let Some(n) = s.strip_suffix("kbit") {
        (n, 1_000)
    } else {
        return Err(bad("expected a number with gbit, mbit or kbit"));
    };
    let v: f64 = num.parse().map_err(|_| bad("not a number"))?;
    if v.is_nan() || v <= 0.0 {
        return Err(bad("must be positive"));
    }
    Ok((v * mult as f64) as u64)
}

/// A unicast MAC address no interface here has (locally administered).
const NOWHERE_MAC: &str = "02:00:5e:00:de:ad";

/// Cuts the link from node `from` to node `to` silently, as a broken cable or a bad switch port
/// does: `from` sends its frames for `to` to a MAC address no interface has (a permanent
/// neighbour entry in `from`'s namespace), the bridge floods them and every port drops them.
/// Nothing answers with an error; TCP just hears nothing back. One direction: cut both for a
/// partition between two nodes.
pub fn cut(from: usize, to: usize) -> Result<(), Error> {
    let (ns, dev) = link_of(from);
    sh(&[
        "ip",
        "-n",
        &ns,
        "neigh",
        "replace",
        &addr_of(to),
        "lladdr",
        NOWHERE_MAC,
        "dev",
        &dev,
        "nud",
        "permanent",
    ])
}

/// Heals what [`cut`] did: the neighbour entry goes and `to`'s address is resolved again.
pub fn heal(from: usize, to: usize) -> Result<(), Error> {
    let (ns, dev) = link_of(from);
    sh(&["ip", "-n", &ns, "neigh", "del", &addr_of(to), "dev", &dev])
}

/// The namespace and inner link of node `i` (or of the coordinator, [`COORDINATOR`]).
fn link_of(i: usize) -> (String, String) {
    if i == COORDINATOR {
        (COORDINATOR_NS.to_string(), "inec-nc".to_string())
    } else {
        (ns_name(i), format!("inec-n{i}"))
    }
}

/// The address of node `i` (or of the coordinator, [`COORDINATOR`]).
fn addr_of(i: usize) -> String {
    if i == COORDINATOR {
        COORDINATOR_ADDR.to_string()
    } else {
        ns_addr(i)
    }
}

/// The address of this machine's own side (the clients') on the bridge.
const HOST_ADDR: &str = "10.77.0.1";

/// Cuts node `node` from the clients silently, both directions: node `node` sends its frames
/// for this machine's bridge address nowhere, and this machine its frames for the node.
/// Nodes still reach each other.
pub fn cut_clients(node: usize) -> Result<(), Error> {
    let (ns, dev) = (ns_name(node), format!("inec-n{node}"));
    let nowhere = ["lladdr", NOWHERE_MAC];
    let perm = ["nud", "permanent"];
    let mut a = vec!["ip", "-n", &ns, "neigh", "replace", HOST_ADDR];
    a.extend(nowhere);
    a.extend(["dev", &dev]);
    a.extend(perm);
    sh(&a)?;
    let addr = ns_addr(node);
    let mut b = vec!["ip", "neigh", "replace", &addr];
    b.extend(nowhere);
    b.extend(["dev", BRIDGE]);
    b.extend(perm);
    sh(&b)
}

/// Heals what [`cut_clients`] did.
pub fn heal_clients(node: usize) -> Result<(), Error> {
    let (ns, dev) = (ns_name(node), format!("inec-n{node}"));
    sh(&["ip", "-n", &ns, "neigh", "del", HOST_ADDR, "dev", &dev])?;
    sh(&["ip", "neigh", "del", &ns_addr(node), "dev", BRIDGE])
}

/// The namespace of the cluster's coordinator (`inec cache up --netns --coordinator local`):
/// on the bridge like a node, apart from the clients' side, so that cutting a node from its
/// clients ([`cut_clients`]) leaves its coordinator reachable, and [`cut`] with
/// [`COORDINATOR`] cuts a node from it.
pub const COORDINATOR_NS: &str = "inec-coord";
/// Its address.
pub const COORDINATOR_ADDR: &str = "10.77.0.2";
/// The node number [`cut`] and [`heal`] take for the coordinator.
pub const COORDINATOR: usize = usize::MAX;

/// Adds the coordinator's namespace to a namespace cluster made by [`setup`] (recorded in
/// `made`, so that `remove` takes it away).
pub fn add_coordinator(made: &mut NetnsCreated) -> Result<(), Error> {
    let ns = COORDINATOR_NS;
    let (host, inner) = ("inec-hc", "inec-nc");
    if Path::new("/run/netns").join(ns).exists() {
        // Left by a cluster that did not come down; the bridge it was on is gone.
        sh(&["ip", "netns", "del", ns])?;
    }
    sh(&["ip", "netns", "add", ns])?;
    made.namespaces.push(ns.to_string());
    sh(&[
        "ip", "link", "add", host, "type", "veth", "peer", "name", inner,
    ])?;
    made.host_links.push(host.to_string());
    sh(&["ip", "link", "set", inner, "netns", ns])?;
    sh(&["ip", "link", "set", host, "master", BRIDGE])?;
    sh(&["ip", "link", "set", host, "up"])?;
    let cidr = format!("{COORDINATOR_ADDR}/16");
    sh(&["ip", "-n", ns, "addr", "add", &cidr, "dev", inner])?;
    sh(&["ip", "-n", ns, "link", "set", inner, "up"])?;
    sh(&["ip", "-n", ns, "link", "set", "lo", "up"])
}

/// What [`setup`] created, so that a failure (or a cluster's `down`) removes exactly that.
#[derive(Debug, Default)]
pub struct NetnsCreated {
    pub bridge: bool,
    pub namespaces: Vec<String>,
    pub host_links: Vec<String>,
}

impl NetnsCreated {
    /// What `setup(n, ..)` creates for nodes `0..n` (for tearing down a cluster whose state
    /// names its namespaces).
    pub fn of_nodes(n: usize) -> NetnsCreated {
        NetnsCreated {
            bridge: true,
            namespaces: (0..n)
                .map(ns_name)
                .chain([COORDINATOR_NS.to_string()])
                .filter(|ns| Path::new("/run/netns").join(ns).exists())
                .collect(),
            host_links: (0..n)
                .map(|i| format!("inec-h{i}"))
                .chain(["inec-hc".to_string()])
                .collect(),
        }
    }

    pub fn remove(&self) {
        for ns in &self.namespaces {
            let _ = sh(&["ip", "netns", "del", ns]);
        }
        let links = self.host_links.iter().map(String::as_str);
        for link in links.chain(self.bridge.then_some(BRIDGE)) {
            let _ = Command::new("ip")
                .args(["link", "del", link])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Creates the bridge, one namespace per node and their veth links. Refuses to touch an
/// existing setup; on failure removes what it created.
pub fn setup(n: usize, rate: Option<&str>) -> Result<NetnsCreated, Error> {
    if link_exists(BRIDGE) {
        return Err(Error::Usage(format!(
            "bridge {BRIDGE} exists: a namespace cluster is already up on this machine \
             (stop it with `inec cluster down --dir <its dir>`, or remove a stale one with \
             `ip link del {BRIDGE}` and `ip netns del inec-ns<i>`)"
        )));
    }
    for i in 0..n {
        if Path::new("/run/netns").join(ns_name(i)).exists() {
            return Err(Error::Usage(format!(
                "network namespace {} exists (left by another cluster?); remove it with \
                 `ip netns del {}`",
                ns_name(i),
                ns_name(i)
            )));
        }
    }
    let mut made = NetnsCreated::default();
    match build(n, rate, &mut made) {
        Ok(()) => Ok(made),
        Err(e) => {
            made.remove();
            Err(e)
        }
    }
}

fn build(n: usize, rate: Option<&str>, made: &mut NetnsCreated) -> Result<(), Error> {
    let tbf = rate
        .map(|r| -> Result<(String, String), Error> {
            let bps = parse_rate(r)?;
            // One millisecond of traffic, at least 16 KiB, as the bucket.
            let burst = (bps / 8 / 1000).max(16 << 10);
            Ok((r.to_string(), format!("{burst}b")))
        })
        .transpose()?;
    sh(&["ip", "link", "add", BRIDGE, "type", "bridge"])?;
    made.bridge = true;
    sh(&[
        "ip",
        "addr",
        "add",
        &format!("{HOST_ADDR}/16"),
        "dev",
        BRIDGE,
    ])?;
    sh(&["ip", "link", "set", BRIDGE, "up"])?;
    for i in 0..n {
        let ns = ns_name(i);
        let (host, inner) = (format!("inec-h{i}"), format!("inec-n{i}"));
        sh(&["ip", "netns", "add", &ns])?;
        made.namespaces.push(ns.clone());
        sh(&[
            "ip", "link", "add", &host, "type", "veth", "peer", "name", &inner,
        ])?;
        made.host_links.push(host.clone());
        sh(&["ip", "link", "set", &inner, "netns", &ns])?;
        sh(&["ip", "link", "set", &host, "master", BRIDGE])?;
        sh(&["ip", "link", "set", &host, "up"])?;
        let cidr = format!("{}/16", ns_addr(i));
        sh(&["ip", "-n", &ns, "addr", "add", &cidr, "dev", &inner])?;
        sh(&["ip", "-n", &ns, "link", "set", &inner, "up"])?;
        sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        if let Some((rate, burst)) = &tbf {
            // Upload: the node's side; download: the bridge's side of its veth. The download
            // queue must absorb incast — k helpers sending to one requester at once — as a
            // switch's buffer does: with a 5 ms queue (about 600 KB at 1 Gbit/s) six 4 MiB
            // senders lose packets and TCP backs off (RS(6,3) repair took 352 ms against
            // k·c/B = 201 ms); 50 ms (about 6 MB) keeps the link busy.
            for (dev, netns) in [(&inner, Some(&ns)), (&host, None)] {
                let mut args = vec!["tc"];
                if let Some(ns) = netns {
                    args.extend(["-n", ns.as_str()]);
                }
                args.extend([
                    "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", burst,
                    "latency", "50ms",
                ]);
                sh(&args)?;
            }
        }
    }
    Ok(())
}
