//! One datagram in, one datagram out, without quinn-udp's control messages where they
//! carry nothing the transport uses.
//!
//! quinn-udp's send is a `sendmsg` that always carries a traffic-class control message, and
//! its receive a `recvmmsg` over a batch of headers it prepares each call. For a single
//! datagram both are dearer than the plain calls: on loopback a 64-byte ping-pong took
//! about 0.5 µs per round trip longer with quinn-udp's send and about 0.6 µs with its
//! receive. Batches (GSO sends, receives into several buffers) still go through quinn-udp.

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};

/// GRO's control message: the size of each datagram a buffer holds (linux/udp.h).
#[cfg(target_os = "linux")]
const UDP_GRO: libc::c_int = 104;

/// Sends `transmit` from `socket` (bound to an IPv6 address if `v6`), with `sendto` when it
/// is one datagram with nothing to say in control messages, or with `send` when the socket
/// is connected to its destination (`connected_to`): a connected socket keeps its route,
/// where each `sendto` looks one up (about 0.9 µs per datagram on loopback here).
pub(crate) fn try_send(udp: &UdpSocketState, socket: &impl AsFd, v6: bool, connected_to: Option<SocketAddr>, transmit: &Transmit<'_>) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    if transmit.segment_size.is_none() && transmit.ecn.is_none() && transmit.src_ip.is_none() {
        let fd = socket.as_fd().as_raw_fd();
        let contents = transmit.contents;
        if connected_to == Some(transmit.destination) {
            // SAFETY: the buffer outlives the call, its length is its own.
            return uninterrupted(|| unsafe { libc::send(fd, contents.as_ptr().cast(), contents.len(), 0) }).map(drop);
        }
        let to = socket2::SockAddr::from(as_socket_names(transmit.destination, v6));
        // SAFETY: the buffer and the address outlive the call, their lengths are theirs.
        return uninterrupted(|| unsafe { libc::sendto(fd, contents.as_ptr().cast(), contents.len(), 0, to.as_ptr().cast(), to.len()) }).map(drop);
    }
    let sent = udp.try_send(socket.into(), transmit);
    #[cfg(target_os = "linux")]
    if let (Err(e), Some(segment)) = (&sent, transmit.segment_size) {
        // The kernel refuses a GSO send whose segments exceed what the route carries (an
        // IPv6 route an ICMPv6 "packet too big" narrowed after the connection's packets were
        // sized): sent one by one, each is fragmented instead, and the connection goes on.
        // (A full socket buffer part way has the caller send the batch again once there is
        // room: the first few arrive twice, which the receiver counts and drops.)
        if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EMSGSIZE | libc::EIO)) {
            for datagram in transmit.contents.chunks(segment) {
                let one = Transmit { destination: transmit.destination, ecn: transmit.ecn, contents: datagram, segment_size: None, src_ip: transmit.src_ip };
                try_send(udp, socket, v6, connected_to, &one)?;
            }
            return Ok(());
        }
    }
    let _ = (v6, connected_to);
    sent
}

/// `addr` as a socket bound to an IPv6 address (if `v6`) names it: the transport names
/// IPv4 peers of a dual-stack socket in their IPv4 form, the socket in the mapped one.
pub(crate) fn as_socket_names(addr: SocketAddr, v6: bool) -> SocketAddr {
    match (v6, addr) {
        (true, SocketAddr::V4(v4)) => SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port()),
        (_, addr) => addr,
    }
}

/// A system call's byte count, the call repeated if a signal interrupted it.
#[cfg(target_os = "linux")]
fn uninterrupted(mut call: impl FnMut() -> libc::ssize_t) -> io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives into `bufs` as quinn-udp's `recv` does; into a single buffer with `recvmsg`,
/// asking only for GRO's segment size.
pub(crate) fn recv(udp: &UdpSocketState, socket: &impl AsFd, bufs: &mut [IoSliceMut<'_>], metas: &mut [RecvMeta]) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    if bufs.len() == 1 && !metas.is_empty() {
        return recv_one(socket.as_fd().as_raw_fd(), &mut bufs[0], &mut metas[0]).map(|()| 1);
    }
    udp.recv(socket.into(), bufs, metas)
}

#[cfg(target_os = "linux")]
fn recv_one(fd: std::os::fd::RawFd, buf: &mut IoSliceMut<'_>, meta: &mut RecvMeta) -> io::Result<()> {
    let mut slot = RecvSlot::new(buf);
    // SAFETY: the header points into `slot` and `buf`, which outlive the call.
    let len = uninterrupted(|| unsafe { libc::recvmsg(fd, slot.prepare(), 0) })?;
    *meta = RecvMeta::default();
    meta.addr = slot.source()?;
    meta.len = len;
    meta.stride = slot.stride().unwrap_or(len);
    Ok(())
}

/// A `recvmsg` header with room for the source address and GRO's control message, around
/// one buffer.
#[cfg(target_os = "linux")]
pub(crate) struct RecvSlot {
    name: libc::sockaddr_storage,
    /// Room for one GRO message (an int), or one ICMP error's (its extended error and the
    /// reporting router's IPv6 address, 60 bytes), aligned for `cmsghdr`.
    control: [u64; 10],
    iov: libc::iovec,
    msg: libc::msghdr,
}

#[cfg(target_os = "linux")]
impl RecvSlot {
    /// A header that receives into `buf` (which must outlive every use of the header).
    pub(crate) fn new(buf: &mut [u8]) -> RecvSlot {
        // SAFETY: all-zero is a valid sockaddr_storage and msghdr (null pointers, no lengths).
        unsafe { RecvSlot { name: std::mem::zeroed(), control: [0; 10], iov: libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() }, msg: std::mem::zeroed() } }
    }

    /// The header for the next receive: pointing into the slot where it now lies (it must
    /// not move until that receive is over and read), with the lengths a receive overwrites.
    pub(crate) fn prepare(&mut self) -> *mut libc::msghdr {
        self.msg.msg_name = (&mut self.name as *mut libc::sockaddr_storage).cast();
        self.msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        self.msg.msg_iov = &mut self.iov;
        self.msg.msg_iovlen = 1;
        self.msg.msg_control = self.control.as_mut_ptr().cast();
        self.msg.msg_controllen = std::mem::size_of_val(&self.control) as _;
        self.msg.msg_flags = 0;
        &mut self.msg
    }

    /// Where the datagram came from.
    pub(crate) fn source(&self) -> io::Result<SocketAddr> {
        let len = self.msg.msg_namelen as usize;
        let name = &self.name as *const libc::sockaddr_storage;
        // SAFETY: the kernel wrote a socket address of `len` bytes, of the family it names,
        // into the storage; each form is read only when that many bytes were written.
        unsafe {
            match self.name.ss_family as libc::c_int {
                libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
                    let a = &*name.cast::<libc::sockaddr_in>();
                    Ok(SocketAddr::new(std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)).into(), u16::from_be(a.sin_port)))
                }
                libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
                    let a = &*name.cast::<libc::sockaddr_in6>();
                    let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
                    Ok(std::net::SocketAddrV6::new(ip, u16::from_be(a.sin6_port), a.sin6_flowinfo, a.sin6_scope_id).into())
                }
                _ => Err(io::Error::other("a datagram from an address that is not IP")),
            }
        }
    }

    /// What an ICMP error read from the error queue said: its errno (the kernel's reading
    /// of the ICMP type and code), if it came from ICMP and not from this host.
    pub(crate) fn icmp_errno(&self) -> Option<i32> {
        let mut errno = None;
        // SAFETY: as in `stride`; an extended error is read only from a message of its level
        // and type, which carries one.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&self.msg);
            while !cmsg.is_null() {
                let (level, kind) = ((*cmsg).cmsg_level, (*cmsg).cmsg_type);
                if (level == libc::IPPROTO_IP && kind == libc::IP_RECVERR) || (level == libc::IPPROTO_IPV6 && kind == libc::IPV6_RECVERR) {
                    let e = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::sock_extended_err>());
                    if matches!(e.ee_origin, libc::SO_EE_ORIGIN_ICMP | libc::SO_EE_ORIGIN_ICMP6) {
                        errno = i32::try_from(e.ee_errno).ok();
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&self.msg, cmsg);
            }
        }
        errno
    }

    /// The size of each datagram in the buffer if GRO joined several.
    pub(crate) fn stride(&self) -> Option<usize> {
        let mut stride = None;
        // SAFETY: the kernel wrote `msg_controllen` bytes of well-formed control messages
        // into `control`; the CMSG macros walk them within that length.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&self.msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_UDP && (*cmsg).cmsg_type == UDP_GRO {
                    let size = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
                    stride = usize::try_from(size).ok().filter(|&s| s > 0);
                }
                cmsg = libc::CMSG_NXTHDR(&self.msg, cmsg);
            }
        }
        stride
    }
}

/// Errors the kernel gives for an ICMP message about an earlier datagram once the socket
/// asks for them (`IP_RECVERR`, see [`report_icmp_errors`]): every errno its ICMP and
/// ICMPv6 error handlers map a message to (port, host or network unreachable, a host
/// down, a protocol unreachable, a parameter problem, a source route that failed, a
/// filter's refusal, a time exceeded, "fragmentation needed" or "packet too big"). Any
/// send or receive may return one in place of its own work, and none says the socket
/// itself failed; the ICMP message waits in the socket's error queue.
pub(crate) fn is_icmp_report(e: &io::Error) -> bool {
    #[cfg(target_os = "linux")]
    return matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNREFUSED
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::ENOPROTOOPT
                | libc::EPROTO
                | libc::EOPNOTSUPP
                | libc::EACCES
                | libc::EMSGSIZE
        )
    );
    #[cfg(not(target_os = "linux"))]
    return e.kind() == io::ErrorKind::ConnectionRefused;
}

/// Asks the kernel to keep the ICMP errors about this socket's datagrams in its error
/// queue, each with the destination of the datagram it is about, so that a connection
/// whose peer's host says nothing listens there can fail at once (see
/// [`take_icmp_errors`]). Without it an unconnected UDP socket hears of none of them.
pub(crate) fn report_icmp_errors(socket: &std::net::UdpSocket, v6: bool) {
    #[cfg(target_os = "linux")]
    {
        let on: libc::c_int = 1;
        let mut options = vec![(libc::IPPROTO_IP, libc::IP_RECVERR)];
        if v6 {
            // (IPv4 peers of a dual-stack socket report through the IPv4 option.)
            options.push((libc::IPPROTO_IPV6, libc::IPV6_RECVERR));
        }
        for (level, name) in options {
            // SAFETY: a plain setsockopt on a socket we own, with a c_int value of the right
            // size; an option the socket's family lacks fails harmlessly.
            unsafe {
                libc::setsockopt(socket.as_raw_fd(), level, name, (&on as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (socket, v6);
}

/// The most messages one look at the error queue reads (a flood of ICMP errors, forged
/// or not, is read over several turns).
const ERRORS_PER_LOOK: usize = 256;

/// Reads what waits in the socket's error queue, up to [`ERRORS_PER_LOOK`] messages: for
/// each ICMP error, the destination of the datagram it is about and its errno (the others,
/// this host's own, are read and dropped). `true` beside them: more may wait.
pub(crate) fn take_icmp_errors(socket: &impl AsFd) -> (Vec<(SocketAddr, i32)>, bool) {
    let mut reports = Vec::new();
    #[cfg(target_os = "linux")]
    {
        let fd = socket.as_fd().as_raw_fd();
        // The datagram the error is about comes back too; only its destination is wanted.
        let mut head = [0u8; 64];
        for _ in 0..ERRORS_PER_LOOK {
            let mut slot = RecvSlot::new(&mut head);
            // SAFETY: the header points into `slot` and `head`, which outlive the call.
            let read = uninterrupted(|| unsafe { libc::recvmsg(fd, slot.prepare(), libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) });
            if read.is_err() {
                return (reports, false); // empty (EAGAIN), or nothing to read on this system
            }
            if let (Ok(destination), Some(errno)) = (slot.source(), slot.icmp_errno()) {
                reports.push((destination, errno));
            }
        }
        (reports, true)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = socket;
        (reports, false)
    }
}
