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
//! connection opens ([`RouteDatagrams`]), and a link narrower still, further on, may
//! fragment them ([`allow_fragmentation`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// How long a route's MTU, once looked up, is taken as known: routes and their MTUs change
/// rarely, and a server accepting a hundred connections from one host looks once.
const ROUTE_KEPT: Duration = Duration::from_secs(10);
/// The most destinations remembered; past it the memory starts again (connections from
/// many addresses each cost one lookup, a few microseconds, beside their key agreement).
const ROUTES_KEPT: usize = 4096;

/// The largest datagram (UDP payload) the route to each peer carries whole, by address.
#[derive(Default)]
pub(crate) struct RouteDatagrams {
    known: HashMap<IpAddr, (Option<usize>, Instant)>,
}

impl RouteDatagrams {
    /// The largest datagram the route to `peer` carries whole, as the kernel's routing
    /// table (the outgoing interface's MTU, or a smaller one ICMP taught it) says; `None`
    /// where it cannot tell.
    pub(crate) fn datagram_to(&mut self, peer: SocketAddr) -> Option<usize> {
        let now = Instant::now();
        let ip = peer.ip().to_canonical();
        if let Some(&(datagram, at)) = self.known.get(&ip) {
            if now.duration_since(at) < ROUTE_KEPT {
                return datagram;
            }
        }
        if self.known.len() >= ROUTES_KEPT {
            self.known.clear();
        }
        let datagram = route_datagram(ip);
        self.known.insert(ip, (datagram, now));
        datagram
    }
}

/// Looks the route to `ip` up with a socket connected to it (no packet leaves: a UDP
/// connect only picks the route) and reads its MTU (`IP_MTU`, `IPV6_MTU`), less the IP
/// and UDP headers.
#[cfg(target_os = "linux")]
fn route_datagram(ip: IpAddr) -> Option<usize> {
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
    Some(mtu as usize - headers as usize)
}

#[cfg(not(target_os = "linux"))]
fn route_datagram(_ip: IpAddr) -> Option<usize> {
    None
}

/// Lets datagrams longer than some link further on reach the peer in fragments rather than
/// not at all. quinn-udp forbids fragmentation, as QUIC does, which probes the path for its
/// packet size; this transport fits its packets to the first link's MTU
/// ([`RouteDatagrams`]) and cannot see past it. IPv4 packets leave without "don't
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
        let mut routes = RouteDatagrams::default();
        let v4 = routes.datagram_to("127.0.0.1:5201".parse().unwrap());
        let mtu: usize = std::fs::read_to_string("/sys/class/net/lo/mtu").unwrap().trim().parse().unwrap();
        // An IP packet is at most 65,535 bytes, whatever the interface's MTU.
        assert_eq!(v4, Some(mtu.min(65_535) - 28));
        assert_eq!(routes.datagram_to("127.0.0.1:1".parse().unwrap()), v4);
        assert_eq!(routes.known.len(), 1);
        // A v4-mapped IPv6 address is the same IPv4 destination.
        assert_eq!(routes.datagram_to("[::ffff:127.0.0.1]:5201".parse().unwrap()), v4);
        assert_eq!(routes.known.len(), 1);
    }
}
