//! What the route to a peer carries whole, and what the socket does with a datagram longer
//! than some link on it.
//!
//! The transport's packets are sized for a 1500-byte IPv4 packet. A route through a
//! tunnel (WireGuard's 1420, a 1280 IPv6 link, PPPoE's 1492) or any IPv6 route (40 bytes
//! of header, not 20) is narrower, and quinn-udp's socket set-up forbids fragmentation
//! (`IP_PMTUDISC_PROBE`, `IPV6_DONTFRAG`): every data packet was refused at the sender
//! (`EMSGSIZE`, or `EINVAL` for a GSO batch) or dropped on the way, while the short
//! handshake and acks passed. The connection stood established and moved nothing. Now
//! each connection's packets are fitted to its route's MTU as the kernel knows it when the
//! connection opens ([`KnownRoutes`]), and a link narrower still, further on, may
//! fragment them ([`allow_fragmentation`]). Where the peer is this host, nothing lies
//! beyond the route, and packets widen to fill it, up to
//! [`fencepost_proto::config::SAME_HOST_DATAGRAM`] (see `TransportConfig::fit_route`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use fencepost_proto::Route;

/// How long a route's MTU, once looked up, is taken as known: routes and their MTUs change
/// rarely, and a server accepting a hundred connections from one host looks once.
const ROUTE_KEPT: Duration = Duration::from_secs(10);
/// The most destinations remembered; past it the memory starts again (connections from
/// many addresses each cost one lookup, a few microseconds, beside their key agreement).
const ROUTES_KEPT: usize = 4096;

/// The route to each peer, by address: the largest datagram (UDP payload) it carries
/// whole, and whether the peer is this host.
#[derive(Default)]
pub(crate) struct KnownRoutes {
    known: HashMap<IpAddr, (Option<Route>, Instant)>,
}

impl KnownRoutes {
    /// The route to `peer` as the kernel's routing table says: the largest datagram it
    /// carries whole (the outgoing interface's MTU, or a smaller one ICMP taught it), and
    /// whether the peer is this host (a loopback address, or one the kernel sends from
    /// itself: one of the host's own); `None` where it cannot tell.
    pub(crate) fn route_to(&mut self, peer: SocketAddr) -> Option<Route> {
        let now = Instant::now();
        let ip = peer.ip().to_canonical();
        if let Some(&(route, at)) = self.known.get(&ip) {
            if now.duration_since(at) < ROUTE_KEPT {
                return route;
            }
        }
        if self.known.len() >= ROUTES_KEPT {
            self.known.clear();
        }
        let route = look_up_route(ip);
        self.known.insert(ip, (route, now));
        route
    }
}

/// Looks the route to `ip` up with a socket connected to it (no packet leaves: a UDP
/// connect only picks the route) and reads its MTU (`IP_MTU`, `IPV6_MTU`), less the IP
/// and UDP headers, and the source address the kernel picked (its own when `ip` is one
/// of this host's addresses).
#[cfg(target_os = "linux")]
fn look_up_route(ip: IpAddr) -> Option<Route> {
    use std::os::fd::AsRawFd;
    let (domain, level, name, headers) = match ip {
        IpAddr::V4(_) => (socket2::Domain::IPV4, libc::IPPROTO_IP, libc::IP_MTU, 20 + 8),
        IpAddr::V6(_) => (socket2::Domain::IPV6, libc::IPPROTO_IPV6, libc::IPV6_MTU, 40 + 8),
    };
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, None).ok()?;
    // Any port: the route depends on the address alone.
    socket.connect(&SocketAddr::new(ip, 9).into()).ok()?;
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a getsockopt on a socket we own, into a c_int whose size we pass.
    let got = unsafe { libc::getsockopt(socket.as_raw_fd(), level, name, (&mut mtu as *mut libc::c_int).cast(), &mut len) };
    if got != 0 || mtu <= headers {
        return None;
    }
    let source = socket.local_addr().ok().and_then(|a| a.as_socket()).map(|a| a.ip().to_canonical());
    let same_host = ip.is_loopback() || source == Some(ip);
    Some(Route { datagram: mtu as usize - headers as usize, same_host })
}

#[cfg(not(target_os = "linux"))]
fn look_up_route(_ip: IpAddr) -> Option<Route> {
    None
}

/// Lets datagrams longer than some link further on reach the peer in fragments rather than
/// not at all. quinn-udp forbids fragmentation, as QUIC does, which probes the path for its
/// packet size; this transport fits its packets to the first link's MTU
/// ([`KnownRoutes`]) and cannot see past it. IPv4 packets leave without "don't
/// fragment", so a narrower router splits them; an IPv6 router never does, but with path
/// MTU discovery on (and `IPV6_DONTFRAG` off) the sending kernel splits what the ICMPv6
/// "packet too big" it received says no longer fits. Where every link is as wide as the
/// first, nothing changes: no datagram is longer than it.
pub(crate) fn allow_fragmentation(socket: &std::net::UdpSocket, v6: bool) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = socket.as_raw_fd();
        let set = |level: libc::c_int, name: libc::c_int, value: libc::c_int| {
            // SAFETY: a plain setsockopt on a socket we own, with a c_int value of the right
            // size; an option the socket's family lacks fails harmlessly.
            unsafe { libc::setsockopt(fd, level, name, (&value as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t) }
        };
        // On a dual-stack socket this governs its IPv4 peers.
        set(libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DONT);
        if v6 {
            set(libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_WANT);
            set(libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, 0);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (socket, v6);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loopback's MTU is 65,536 on Linux: the lookup reads the kernel's route, not a constant,
    /// and a second ask within the time a route is kept answers from memory.
    #[test]
    #[cfg(target_os = "linux")]
    fn the_route_to_loopback_carries_its_interfaces_mtu() {
        let mut routes = KnownRoutes::default();
        let v4 = routes.route_to("127.0.0.1:5201".parse().unwrap());
        let mtu: usize = std::fs::read_to_string("/sys/class/net/lo/mtu").unwrap().trim().parse().unwrap();
        // An IP packet is at most 65,535 bytes, whatever the interface's MTU.
        assert_eq!(v4, Some(Route { datagram: mtu.min(65_535) - 28, same_host: true }));
        assert_eq!(routes.route_to("127.0.0.1:1".parse().unwrap()), v4);
        assert_eq!(routes.known.len(), 1);
        // A v4-mapped IPv6 address is the same IPv4 destination.
        assert_eq!(routes.route_to("[::ffff:127.0.0.1]:5201".parse().unwrap()), v4);
        assert_eq!(routes.known.len(), 1);
    }

    /// One of the host's own addresses is the same host (the kernel routes it over
    /// loopback); an address reached through an interface is not. Where this host has no
    /// route beyond itself (a bare namespace) only the loopback case above can be checked.
    #[test]
    #[cfg(target_os = "linux")]
    fn the_hosts_own_address_is_the_same_host_and_a_remote_one_is_not() {
        let remote: IpAddr = "198.51.100.7".parse().unwrap(); // documentation range, never this host
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if probe.connect((remote, 9)).is_err() {
            eprintln!("no route leaves this host: skipped");
            return;
        }
        let own = probe.local_addr().unwrap().ip();
        let mut routes = KnownRoutes::default();
        let outward = routes.route_to(SocketAddr::new(remote, 9)).expect("the route the probe took");
        assert!(!outward.same_host, "{outward:?}");
        let inward = routes.route_to(SocketAddr::new(own, 9)).expect("a route to the host's own address");
        assert!(inward.same_host && inward.datagram > outward.datagram.min(1_472) - 1, "{own}: {inward:?}");
    }
}
