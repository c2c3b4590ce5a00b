//! Raw Ethernet frames on one interface through an `AF_PACKET` socket: the
//! emulator reads every frame that arrives on an interface and writes frames
//! out of another, so B's kernel never forwards anything itself.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Linux 4.20+: do not hand the socket the frames it (or anyone on this host) sends.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `SO_TIMESTAMPNS` (the "old" one, whose timespec is the native `struct timespec`;
/// the same number on every architecture Linux runs the lab on but sparc, mips and parisc).
const SO_TIMESTAMPNS: libc::c_int = 35;
/// The largest frame read: a 64 KiB GSO frame would only arrive if offloads were left on.
pub const MAX_FRAME: usize = 65_536 + 14;

fn check(ret: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(ret)
    }
}

pub fn interface_index(name: &str) -> io::Result<i32> {
    let c = std::ffi::CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface {name:?} in this network namespace")));
    }
    Ok(index as i32)
}

/// A non-blocking packet socket bound to one interface.
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
    pub name: String,
}

impl PacketSocket {
    pub fn open(name: &str, buffer_bytes: usize) -> io::Result<PacketSocket> {
        let ifindex = interface_index(name)?;
        let protocol = (libc::ETH_P_ALL as u16).to_be();
        let raw = check(
            unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, protocol as libc::c_int) },
            "packet socket (needs root or CAP_NET_RAW)",
        )?;
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let one: libc::c_int = 1;
        set_int(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, one, "PACKET_IGNORE_OUTGOING (Linux 4.20 or later)")?;
        // The kernel stamps each frame as it arrives, so a frame's time on the link starts
        // then and not when the emulator woke up to read it.
        set_int(raw, libc::SOL_SOCKET, SO_TIMESTAMPNS, one, "SO_TIMESTAMPNS")?;
        // Room for a burst that arrives while the emulator is busy; FORCE needs CAP_NET_ADMIN, the plain one is capped.
        let size = buffer_bytes.min(i32::MAX as usize) as libc::c_int;
        if set_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size, "SO_RCVBUFFORCE").is_err() {
            set_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, size, "SO_RCVBUF")?;
        }
        if set_int(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, size, "SO_SNDBUFFORCE").is_err() {
            set_int(raw, libc::SOL_SOCKET, libc::SO_SNDBUF, size, "SO_SNDBUF")?;
        }
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol;
        addr.sll_ifindex = ifindex;
        check(
            unsafe { libc::bind(raw, &addr as *const _ as *const libc::sockaddr, std::mem::size_of::<libc::sockaddr_ll>() as u32) },
            &format!("bind to {name}"),
        )?;
        let socket = PacketSocket { fd, ifindex, name: name.to_string() };
        // Frames from other interfaces may have queued between socket() and bind().
        let mut scratch = vec![0u8; MAX_FRAME];
        while socket.recv(&mut scratch)?.is_some() {}
        Ok(socket)
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// One frame, or `None` when nothing is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        Ok(self.recv_stamped(buf)?.map(|(n, _)| n))
    }

    /// One frame with the kernel's arrival time (`CLOCK_REALTIME`, nanoseconds), or `None`
    /// when nothing is waiting. The length is the frame's own, even if `buf` was shorter.
    pub fn recv_stamped(&self, buf: &mut [u8]) -> io::Result<Option<(usize, Option<i128>)>> {
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // Room for one control message holding a timespec, aligned as cmsghdr wants.
        let mut control = [0u64; 8];
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = unsafe { libc::recvmsg(self.raw(), &mut msg, libc::MSG_TRUNC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        let mut stamp = None;
        // SAFETY: the CMSG macros walk the control buffer the kernel filled, bounded by msg_controllen.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == SO_TIMESTAMPNS {
                    let ts = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::timespec);
                    stamp = Some(ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128);
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        Ok(Some((n as usize, stamp)))
    }

    /// Writes a whole Ethernet frame out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = self.ifindex;
        addr.sll_halen = 6;
        if frame.len() >= 6 {
            addr.sll_addr[..6].copy_from_slice(&frame[..6]);
        }
        let n = unsafe {
            libc::sendto(
                self.raw(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                0,
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Frames the kernel dropped because this socket's buffer was full, since the last call.
    pub fn kernel_drops(&self) -> u64 {
        #[repr(C)]
        struct TpacketStats {
            packets: u32,
            drops: u32,
        }
        let mut stats = TpacketStats { packets: 0, drops: 0 };
        let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
        const PACKET_STATISTICS: libc::c_int = 6;
        let ret = unsafe { libc::getsockopt(self.raw(), libc::SOL_PACKET, PACKET_STATISTICS, &mut stats as *mut _ as *mut libc::c_void, &mut len) };
        if ret < 0 {
            0
        } else {
            stats.drops as u64
        }
    }
}

fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int, what: &str) -> io::Result<()> {
    check(
        unsafe { libc::setsockopt(fd, level, name, &value as *const _ as *const libc::c_void, std::mem::size_of::<libc::c_int>() as u32) },
        what,
    )?;
    Ok(())
}
