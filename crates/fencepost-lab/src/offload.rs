//! Turning a veth's offloads off. With segmentation and checksum offload on, a
//! host hands its veth 64 KiB TCP segments and packets whose checksum is left
//! for the "hardware" to fill in; a packet socket in the middle would read the
//! first as one giant frame and forward the second with a wrong checksum. So
//! every lab interface carries MTU-sized frames with finished checksums, like
//! a real wire.

use std::io;
use std::os::fd::AsRawFd;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
// The single-feature set commands of the ethtool ioctl (linux/ethtool.h).
const ETHTOOL_SRXCSUM: u32 = 0x15;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_SGRO: u32 = 0x2c;

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

fn set(fd: i32, iface: &str, cmd: u32, on: bool) -> io::Result<()> {
    let mut value = EthtoolValue { cmd, data: on as u32 };
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], data: &mut value as *mut _ as *mut libc::c_void, _pad: [0; 16] };
    if iface.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("interface name {iface:?} is too long")));
    }
    for (d, s) in req.name.iter_mut().zip(iface.bytes()) {
        *d = s as libc::c_char;
    }
    if unsafe { libc::ioctl(fd, SIOCETHTOOL as _, &mut req) } < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("ethtool ioctl {cmd:#x} on {iface}: {e}")));
    }
    Ok(())
}

/// Turns segmentation, receive aggregation and checksum offloads off on `iface`
/// in the calling thread's network namespace.
pub fn offloads_off(iface: &str) -> io::Result<()> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| std::net::UdpSocket::bind("[::]:0"))?;
    let fd = socket.as_raw_fd();
    // Segmentation depends on checksumming: turn the dependants off first.
    for cmd in [ETHTOOL_STSO, ETHTOOL_SGSO, ETHTOOL_SGRO, ETHTOOL_SSG, ETHTOOL_STXCSUM, ETHTOOL_SRXCSUM] {
        set(fd, iface, cmd, false)?;
    }
    Ok(())
}

/// Runs `job` in a thread that has entered the named network namespace (`ip netns`'s name).
pub fn in_netns<T: Send + 'static>(netns: &str, job: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
    let path = format!("/run/netns/{netns}");
    let file = std::fs::File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("network namespace {netns:?} ({path}): {e}")))?;
    std::thread::spawn(move || {
        // The thread is thrown away after, so the namespace change dies with it.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("entering network namespace: {e}")));
        }
        job()
    })
    .join()
    .map_err(|_| io::Error::other("namespace thread panicked"))?
}
