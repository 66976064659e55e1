//! Which local server a driver talks to: its TCP connections to a port that a process on
//! this node listens on, read from `/proc/net/tcp` and `/proc/net/tcp6` (one read each per
//! scan, whatever the number of processes) and the processes' socket inodes.

use crate::procfs::Procfs;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// The kernel's TCP states (include/net/tcp_states.h) we look at.
const ESTABLISHED: u8 = 0x01;
const LISTEN: u8 = 0x0A;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socket {
    pub inode: u64,
    pub local: (IpAddr, u16),
    pub remote: (IpAddr, u16),
    pub state: u8,
}

/// Every TCP socket of this network namespace; an unreadable table is an empty one.
pub fn read(procfs: &Procfs) -> Vec<Socket> {
    procfs
        .tcp_tables(None)
        .iter()
        .flat_map(|t| parse(t))
        .collect()
}

/// Every TCP socket of the network namespace process `pid` lives in (a container's own).
pub fn read_of(procfs: &Procfs, pid: u32) -> Vec<Socket> {
    procfs
        .tcp_tables(Some(pid))
        .iter()
        .flat_map(|t| parse(t))
        .collect()
}

/// The established connections among `from` (a process's socket inodes).
pub fn established<'a>(
    sockets: &'a [Socket],
    from: &'a BTreeSet<u64>,
) -> impl Iterator<Item = &'a Socket> {
    sockets
        .iter()
        .filter(|s| s.state == ESTABLISHED && from.contains(&s.inode))
}

/// The rows of one `/proc/net/tcp*` table; a row that does not read exactly is left out.
pub fn parse(table: &str) -> Vec<Socket> {
    table.lines().skip(1).filter_map(row).collect()
}

fn row(line: &str) -> Option<Socket> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let local = address(fields.get(1)?)?;
    let remote = address(fields.get(2)?)?;
    let state = u8::from_str_radix(fields.get(3)?, 16).ok()?;
    let inode = fields.get(9)?.parse().ok()?;
    Some(Socket {
        inode,
        local,
        remote,
        state,
    })
}

/// `0100007F:1F90` (IPv4) or 32 hex digits (IPv6), each 32-bit word in the host's byte order.
fn address(text: &str) -> Option<(IpAddr, u16)> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..ip.len() / 8)
        .map(|i| u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let ip = match bytes.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
        16 => {
            let v6 = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?);
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        }
        _ => return None,
    };
    Some((ip, port))
}

/// The socket inodes among a process's open files (`socket:[12345]`).
pub fn inodes<'a>(targets: impl Iterator<Item = &'a std::path::Path>) -> BTreeSet<u64> {
    targets
        .filter_map(|t| {
            t.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// The listening sockets that the connections among `from` (a driver's sockets) reach: a
/// connection to one of this node's addresses (the loopback, or an address some socket here
/// is bound to), at a port it listens on, at the listener's address or at any.
pub fn reached(sockets: &[Socket], from: &BTreeSet<u64>) -> BTreeSet<u64> {
    let listening: Vec<&Socket> = sockets.iter().filter(|s| s.state == LISTEN).collect();
    let ours = local_addresses(sockets);
    established(sockets, from)
        .filter(|c| c.remote.0.is_loopback() || ours.contains(&c.remote.0))
        .flat_map(|c| {
            listening.iter().filter(move |l| {
                l.local.1 == c.remote.1 && (l.local.0.is_unspecified() || l.local.0 == c.remote.0)
            })
        })
        .map(|l| l.inode)
        .collect()
}

/// Whether a process family (its socket inodes, `from`) is a client of some service on this
/// node: an established connection to a local port that the family does not itself listen
/// on. Connections among the family's own processes (an engine's worker talking to its own
/// store, vLLM's EngineCore beside an offline driver) are not: such a driver runs its engine
/// in-process and has no server.
pub fn talks_out(sockets: &[Socket], from: &BTreeSet<u64>) -> bool {
    !local_ports_reached(sockets, from).is_empty()
}

/// The ports of this node that a process family (its socket inodes, `from`) is connected to
/// as a client: what [`talks_out`] counts, by port. The listener may be a process whose
/// sockets are not ours to read.
pub fn local_ports_reached(sockets: &[Socket], from: &BTreeSet<u64>) -> BTreeSet<u16> {
    let own_ports: BTreeSet<u16> = sockets
        .iter()
        .filter(|s| s.state == LISTEN && from.contains(&s.inode))
        .map(|s| s.local.1)
        .collect();
    let ours = local_addresses(sockets);
    established(sockets, from)
        .filter(|c| {
            (c.remote.0.is_loopback() || ours.contains(&c.remote.0))
                && !own_ports.contains(&c.remote.1)
                && !own_ports.contains(&c.local.1)
        })
        .map(|c| c.remote.1)
        .collect()
}

/// The addresses some socket here is bound to: this node's own.
fn local_addresses(sockets: &[Socket]) -> BTreeSet<IpAddr> {
    sockets
        .iter()
        .map(|s| s.local.0)
        .filter(|ip| !ip.is_unspecified())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As `/proc/net/tcp` prints them on x86_64 (little-endian words): a server listening on
    /// 127.0.0.1:8000 (inode 100) and on *:8001 (101), the driver connected to 8000 (200) and
    /// to a remote 10.0.0.7:8001 (201), which is not this node's 8001.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 100 1 0000000000000000 100 0 0 10 0
   1: 00000000:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 101 1 0000000000000000 100 0 0 10 0
   2: 0100007F:A1B2 0100007F:1F40 01 00000000:00000000 00:00000000 00000000  1000        0 200 1 0000000000000000 20 4 30 10 -1
   3: 0500000A:A1B3 0700000A:1F41 01 00000000:00000000 00:00000000 00000000  1000        0 201 1 0000000000000000 20 4 30 10 -1
   4: garbage
";

    #[test]
    fn a_connection_reaches_the_local_listener_on_its_port() {
        let sockets = parse(TCP);
        assert_eq!(sockets.len(), 4, "the garbage row is left out");
        assert_eq!(
            sockets[0].local,
            ("127.0.0.1".parse().unwrap(), 8000),
            "{sockets:?}"
        );
        assert_eq!(
            reached(&sockets, &BTreeSet::from([200])),
            BTreeSet::from([100])
        );
        assert_eq!(
            reached(&sockets, &BTreeSet::from([201])),
            BTreeSet::new(),
            "10.0.0.7 is another node: its port 8001 is not this node's"
        );
        assert_eq!(reached(&sockets, &BTreeSet::from([100])), BTreeSet::new());
    }

    #[test]
    fn a_client_of_a_local_port_talks_out_a_family_talking_to_itself_does_not() {
        let sockets = parse(TCP);
        assert!(
            talks_out(&sockets, &BTreeSet::from([200])),
            "to 127.0.0.1:8000"
        );
        assert!(
            !talks_out(&sockets, &BTreeSet::from([201])),
            "to another node only"
        );
        assert!(
            !talks_out(&sockets, &BTreeSet::from([200, 100])),
            "to its own listener: an engine in its own process family"
        );
        assert!(!talks_out(&sockets, &BTreeSet::new()), "no socket at all");
    }

    #[test]
    fn ipv6_and_v4_mapped_addresses() {
        let (ip, port) = address("0000000000000000FFFF00000100007F:1F40").unwrap();
        assert_eq!((ip, port), ("127.0.0.1".parse().unwrap(), 8000));
        let (ip, _) = address("00000000000000000000000001000000:0050").unwrap();
        assert_eq!(ip, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(address("zz:1"), None);
    }

    #[test]
    fn socket_inodes_from_fd_targets() {
        let targets = [
            std::path::PathBuf::from("socket:[123]"),
            "/data/log".into(),
            "pipe:[9]".into(),
        ];
        assert_eq!(
            inodes(targets.iter().map(|t| t.as_path())),
            BTreeSet::from([123])
        );
    }
}
